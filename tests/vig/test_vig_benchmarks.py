"""The paper profile's benchmark readers on tiny files in their published layouts, their metrics
against hand-computed values, and bad files failing with the file and the field named."""
import json

import pytest

from components.common.readers import DatasetError
from components.vig import benchmarks as bm
from tests.paper.layouts import write_jsonl
from tests.vig import benchmark_files as files


def test_pope_reads_and_rejects_a_bad_label(tmp_path):
    path, images = files.write_pope(tmp_path)
    qs = bm.read_pope(str(path), str(images))
    assert [q.answer for q in qs] == ["yes", "no", "yes", "no"]
    assert qs[0].prompt.startswith("Is there a dog in the image?") and qs[0].prompt.endswith(bm.SHORT)
    bad, _ = files.write_pope(tmp_path / "bad", labels=("yes", "maybe"))
    with pytest.raises(DatasetError, match=r"coco_pope_random\.json: record 2: field 'label'"):
        bm.read_pope(str(bad), str(images))
    with pytest.raises(DatasetError, match=r"record 1: field 'image' names a missing file"):
        bm.read_pope(str(path), str(tmp_path / "nowhere"))


def test_pope_scores_from_predictions():
    qs = [bm.Question(str(i), "", "", a) for i, a in enumerate(["yes", "no", "no", "yes", "yes"])]
    m = bm.score_pope(qs, ["yes", "yes", "no", "no", "yes"])
    # tp 2, fp 1, fn 1: precision = recall = F1 = 2/3; 3 of 5 right; 3 of 5 said yes
    assert m["acc"] == pytest.approx(60.0) and m["yes_ratio"] == pytest.approx(60.0)
    assert m["precision"] == pytest.approx(200 / 3) and m["f1"] == pytest.approx(200 / 3)


def test_mmbench_rotations_keep_the_right_option(tmp_path):
    qs = bm.read_mmbench(str(files.write_mmbench(tmp_path / "mmbench_dev.tsv")))
    assert [q.qid for q in qs] == ["0/0", "0/1", "0/2", "0/3", "1/0", "1/1", "1/2", "2/0", "2/1"]
    truth = {"0": "blue", "1": "three", "2": "yes"}
    for q in qs:
        line = next(ln for ln in q.prompt.splitlines() if ln.startswith(f"{q.answer}. "))
        assert line == f"{q.answer}. {truth[q.qid.split('/')[0]]}"
    assert qs[0].prompt.startswith("A street scene.\nWhat colour is the car?")
    assert qs[4].prompt.startswith("How many dogs?") and qs[4].options == ("A", "B", "C")
    assert qs[7].image == qs[0].image          # row 2's image cell is row 0's index


def test_mmbench_circular_accuracy():
    qs = [bm.Question(qid, "", "", "A") for qid in ["0/0", "0/1", "1/0", "1/1"]]
    m = bm.score_mmbench(qs, ["A", "A", "A", "B"])      # row 0 right twice, row 1 once
    assert m["acc"] == pytest.approx(100.0) and m["circular_acc"] == pytest.approx(50.0)


def test_mmbench_bad_files_name_the_field(tmp_path):
    rows = files.mmbench_rows()
    rows[1]["answer"] = "D"                     # row 1 has three options
    with pytest.raises(DatasetError, match=r"bad\.tsv: line 3: field 'answer' must be one of"):
        bm.read_mmbench(str(files.write_mmbench(tmp_path / "bad.tsv", rows)))
    rows = files.mmbench_rows()
    rows[0]["image"] = "not base64!"
    with pytest.raises(DatasetError, match=r"line 2: field 'image' is not base64"):
        bm.read_mmbench(str(files.write_mmbench(tmp_path / "bad2.tsv", rows)))
    header = [c for c in files.MMBENCH_HEADER if c != "answer"]
    with pytest.raises(DatasetError, match=r"nocol\.tsv: missing column\(s\) \['answer'\]"):
        bm.read_mmbench(str(files.write_mmbench(tmp_path / "nocol.tsv", header=header)))


def test_cvbench_reads_and_summarises_like_cvbench(tmp_path):
    qs = bm.read_cvbench(str(files.write_cvbench(tmp_path)))
    assert [q.answer for q in qs] == ["B", "A", "D", "B", "A", "B"]
    assert [q.group for q in qs] == ["ADE20K", "ADE20K", "COCO", "COCO", "Omni3D", "Omni3D"]
    # ADE20K 1/2, COCO 2/2, Omni3D 0/2: 2D = (50 + 100) / 2 = 75, 3D = 0, overall 37.5
    m = bm.score_cvbench(qs, ["B", "B", "D", "B", "B", "A"])
    assert m["acc_ade20k"] == 50 and m["acc_coco"] == 100 and m["acc_2d"] == 75
    assert m["acc_3d"] == 0 and m["acc"] == pytest.approx(37.5)


def test_cvbench_bad_answer_names_the_field(tmp_path):
    rows = files.cvbench_rows()
    rows[1]["answer"] = "(C)"                   # two choices only
    with pytest.raises(DatasetError, match=r"test\.jsonl: record 2: field 'answer' must be one of"):
        bm.read_cvbench(str(files.write_cvbench(tmp_path, rows)))
    rows = files.cvbench_rows()
    del rows[0]["choices"]
    with pytest.raises(DatasetError, match=r"test\.jsonl:1: missing field 'choices'"):
        bm.read_cvbench(str(write_jsonl(tmp_path / "x" / "test.jsonl", rows)))


def test_anls_closed_form():
    assert bm.anls("1 march 1990", ["1 March 1990"]) == 1.0
    assert bm.anls("helo", ["hello"]) == pytest.approx(0.8)          # one edit over 5 characters
    assert bm.anls("goodbye", ["hello"]) == 0.0                        # NL >= 0.5 scores 0
    assert bm.anls("J Smith", ["nobody", "J. Smith"]) == pytest.approx(1 - 1 / 8)


def test_docvqa_reads_and_rejects_the_test_split(tmp_path):
    qs = bm.read_docvqa(str(files.write_docvqa(tmp_path)))
    assert qs[0].answer == ["1 March 1990", "March 1, 1990"] and qs[1].qid == "2"
    assert bm.score_docvqa(qs, ["1 march 1990", "nobody"])["anls"] == pytest.approx(50.0)
    test_split = [{"questionId": 3, "question": "Q?", "image": "documents/c.png"}]
    with pytest.raises(DatasetError, match=r"val_v1\.0\.json: data\[0\]: field 'answers' .*test split"):
        bm.read_docvqa(str(files.write_docvqa(tmp_path / "test", test_split)))


def test_chair_matches_synonyms_and_plurals():
    caption = "Two men on a sofa with a puppy; hot dogs and wine glasses on the dining table. Blue skies."
    assert bm.mentioned_objects(caption) == ["person", "couch", "dog", "hot dog", "wine glass", "dining table"]


def test_chair_scores_closed_form(tmp_path):
    path, images = files.write_coco_instances(tmp_path)
    qs = bm.read_coco_chair(str(path), str(images), n_images=0)
    assert [set(q.answer) for q in qs] == [{"dog", "couch"}, {"cat"}, {"person", "dog"}, {"couch"}]
    captions = ["A dog and a cat on a couch.", "A cat.", "A man with his dog.", "An empty room."]
    m = bm.score_chair(qs, captions)
    # mentions 3 + 1 + 2 + 0 = 6, one hallucinated (cat in image 1): CHAIR_i 1/6, CHAIR_s 1/4;
    # recall: 2 + 1 + 2 + 0 of 2 + 1 + 2 + 1 annotated objects
    assert m["i"] == pytest.approx(100 / 6) and m["s"] == pytest.approx(25.0)
    assert m["recall"] == pytest.approx(500 / 6)
    assert len(bm.read_coco_chair(str(path), str(images), n_images=2)) == 2


def test_chair_rejects_a_non_coco_file(tmp_path):
    path, images = files.write_coco_instances(tmp_path)
    data = json.loads(path.read_text())
    data["categories"][0]["name"] = "unicorn"
    path.write_text(json.dumps(data))
    with pytest.raises(DatasetError, match=r"instances_val2014\.json: field 'categories' has names outside"):
        bm.read_coco_chair(str(path), str(images), 0)
    path.write_text(json.dumps({"images": []}))
    with pytest.raises(DatasetError, match=r"missing list field 'annotations'"):
        bm.read_coco_chair(str(path), str(images), 0)


def test_first_token_ids_must_differ():
    class Tok:
        def __call__(self, text, add_special_tokens=False):
            return type("E", (), {"input_ids": [7 if text.startswith("Y") else 8]})()

    assert bm.first_token_ids(Tok(), ["Yes", "No"]) == [7, 8]
    with pytest.raises(ValueError, match="clashing first tokens"):
        bm.first_token_ids(Tok(), ["Yes", "Yeah"])
