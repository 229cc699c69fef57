"""vig's paper profile end to end (DVC + Prefect + MLflow) on a tiny LlavaConfig checkpoint saved
to a tmp folder, a 5-row LLaVA-665K-layout JSON with generated images, and tiny POPE, MMBench,
CV-Bench, DocVQA and COCO-instances (CHAIR) files in their published layouts."""
import json
import math

import pytest

from components.common.io import read_table
from tests.paper.harness import run_paper_shape
from tests.vig import benchmark_files as files

pytestmark = pytest.mark.paper_shape

SHRINK = ["seeds=[0]", "paper.device=cpu", "paper.batch_size=4", "paper.max_len=192",
          "paper.max_new_tokens=4", "paper.caption_tokens=6", "paper.chair_images=0",
          "train.steps=2", "train.batch_size=2", "train.lr=1e-3", "paper.lora_rank=2", "vig.keep_percent=50"]


def write_png(path, seed: int, size: int = 24):
    return files.write_png(path, seed, size, size)


def write_llava_mix(root):
    """llava_v1_5_mix665k.json's layout: image paths relative to the root, one text-only row."""
    images = ["coco/train2017/000000000001.png", "gqa/images/2354786.png", "vg/VG_100K/10.png",
              "textvqa/train_images/0054c91397f2fe05.png"]
    for i, rel in enumerate(images):
        write_png(root / "images" / rel, i)
    rows = [{"id": str(i), "image": rel,
             "conversations": [{"from": "human", "value": "<image>\nWhat is in the picture?"},
                               {"from": "gpt", "value": "A small red square on the left."},
                               {"from": "human", "value": "Is it large?"},
                               {"from": "gpt", "value": "No."}]}
            for i, rel in enumerate(images)]
    rows.append({"id": "text-0", "conversations": [{"from": "human", "value": "What is two plus two?"},
                                                   {"from": "gpt", "value": "Four."}]})
    path = root / "llava_v1_5_mix665k.json"
    path.write_text(json.dumps(rows))
    return path, root / "images"


def benchmark_sets(root) -> list[str]:
    """Every benchmark of paper.benchmarks in its layout; POPE and CHAIR share val2014/."""
    pope, val2014 = files.write_pope(root / "coco")
    instances, _ = files.write_coco_instances(root / "coco")
    return [f"paper.pope_jsonl={pope}", f"paper.coco_val2014={val2014}", f"paper.coco_instances={instances}",
            f"paper.mmbench_tsv={files.write_mmbench(root / 'mmbench' / 'mmbench_dev_20230712.tsv')}",
            f"paper.cvbench_jsonl={files.write_cvbench(root / 'CV-Bench')}",
            f"paper.docvqa_json={files.write_docvqa(root / 'docvqa' / 'val')}"]


@pytest.mark.slow  # CI time (~40 s) keeps the CI run under 30 minutes; `make test-all` runs it
def test_vig_paper_profile_on_tiny_llava(tmp_path, tiny_checkpoints):
    llava_json, image_root = write_llava_mix(tmp_path / "llava")
    sets = SHRINK + [f"paper.model_path={tiny_checkpoints.checkpoint('llava')}", f"data.llava_json={llava_json}",
                     f"data.image_root={image_root}"] + benchmark_sets(tmp_path / "bench")
    result = run_paper_shape("vig", tmp_path / "project", sets)

    prep = result.metrics("vig", "prepare_data")
    assert prep["n_train"] == 5 and prep["n_multimodal"] == 4 and prep["answer_tokens"] > 0
    score = result.metrics("vig", "score_vig")
    assert math.isfinite(score["d_answer_mean"])
    # text-only rows get a flat grey image under both views: blurring it changes nothing
    assert score["vig_mean_text"] == pytest.approx(0.0, abs=1e-5)
    select = result.metrics("vig", "select")
    assert select["kept_multimodal"] == 2 and 0 < select["token_fraction"] < 1
    counts = {v: read_table(result.out("vig", "select") / "selection.parquet") for v in ["vig"]}
    assert sum(counts["vig"].column("kept").to_pylist()) == 2
    arms = {v: result.metrics("vig", "train_arm", f"{v}-0") for v in ("vanilla", "random", "vig")}
    assert arms["vig"]["supervised_tokens"] < arms["vanilla"]["supervised_tokens"]
    assert arms["random"]["supervised_multimodal_tokens"] == arms["vig"]["supervised_multimodal_tokens"]
    assert (result.out("vig", "train_arm", "vig-0") / "adapter" / "adapter_config.json").is_file()
    evaluate = result.metrics("vig", "evaluate")
    assert (evaluate["n_pope"], evaluate["n_mmbench"], evaluate["n_cvbench"]) == (4, 9, 6)
    assert (evaluate["n_docvqa"], evaluate["n_chair"]) == (2, 4)
    for v in ("vanilla", "random", "vig"):
        for view in ("image", "blur"):
            for key in ("pope_acc", "pope_f1", "pope_yes_ratio", "mmbench_acc", "mmbench_circular_acc",
                        "cvbench_acc", "cvbench_acc_2d", "cvbench_acc_3d"):
                assert 0 <= evaluate[f"{v}_{key}_{view}"] <= 100, (v, key, view)
        for key in ("docvqa_anls", "chair_s", "chair_i", "chair_recall"):
            assert 0 <= evaluate[f"{v}_{key}_image"] <= 100, (v, key)
        assert 0 < evaluate[f"{v}_chair_words_image"] <= 6 * 4    # at most caption_tokens tokens
    assert "vig_minus_vanilla_pope_f1_image" in evaluate and "vig_minus_random_mmbench_circular_acc_image" in evaluate
    answers = read_table(result.out("vig", "evaluate") / "answers-docvqa-vig-0.parquet")
    assert answers.column_names == ["qid", "answer", "pred_image"] and answers.num_rows == 2


def test_vig_paper_preflight_names_the_missing_key_in_one_line(tmp_path, tiny_checkpoints):
    from components.common.preflight import PreflightError
    from components.vig.config import VigConfig

    with pytest.raises(PreflightError, match=r"^paper\.model_path = '' is not set") as err:
        VigConfig.for_profile("paper").preflight()
    assert "\n" not in str(err.value)
    llava_json, image_root = write_llava_mix(tmp_path / "llava")
    paths = {"paper": {"model_path": str(tiny_checkpoints.checkpoint("llava"))},
             "data": {"llava_json": str(llava_json), "image_root": str(image_root)}}
    with pytest.raises(PreflightError, match=r"^paper\.pope_jsonl = '' is not set"):
        VigConfig.for_profile("paper", paths).preflight()
    pope, val2014 = files.write_pope(tmp_path / "coco", labels=("yes", "perhaps"))
    paths["paper"].update(pope_jsonl=str(pope), coco_val2014=str(val2014), benchmarks=["pope"])
    with pytest.raises(PreflightError, match=r"^paper\.pope_jsonl = .* is malformed .*record 2: field 'label'") as err:
        VigConfig.for_profile("paper", paths).preflight()
    assert "\n" not in str(err.value)
    pope, val2014 = files.write_pope(tmp_path / "coco")
    paths["paper"]["benchmarks"] = ["pope", "mme"]
    with pytest.raises(PreflightError, match=r"^paper\.benchmarks = 'mme' names an unknown benchmark"):
        VigConfig.for_profile("paper", paths).preflight()
    paths["paper"]["model_path"] = str(tiny_checkpoints.checkpoint("llama"))
    with pytest.raises(PreflightError, match="paper.model_path .* not 'llava'"):
        VigConfig.for_profile("paper", paths).preflight()
    VigConfig.for_profile("small").preflight()          # the small profile needs no paths
