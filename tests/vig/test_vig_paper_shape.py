"""vig's paper profile end to end (DVC + Prefect + MLflow) on a tiny LlavaConfig checkpoint saved
to a tmp folder, a 5-row LLaVA-665K-layout JSON with generated images, and a POPE-layout JSONL."""
import json
import math

import numpy as np
import pytest

from components.common.io import read_table
from tests.paper.harness import run_paper_shape
from tests.paper.layouts import write_jsonl

pytestmark = pytest.mark.paper_shape

SHRINK = ["seeds=[0]", "paper.device=cpu", "paper.batch_size=4", "paper.max_len=64",
          "train.steps=2", "train.batch_size=2", "train.lr=1e-3", "paper.lora_rank=2", "vig.keep_percent=50"]


def write_png(path, seed: int, size: int = 24):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
    return path


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


def write_pope(root):
    names = [f"COCO_val2014_{i:012d}.jpg" for i in range(4)]
    for i, name in enumerate(names):
        write_png(root / "val2014" / name, 10 + i)
    rows = [{"question_id": i + 1, "image": name, "text": f"Is there a {obj} in the image?", "label": label}
            for i, (name, obj, label) in enumerate(zip(names, ["dog", "cat", "car", "cup"], ["yes", "no", "yes", "no"]))]
    return write_jsonl(root / "coco_pope_random.json", rows), root / "val2014"


@pytest.mark.slow  # CI time (~40 s) keeps the CI run under 30 minutes; `make test-all` runs it
def test_vig_paper_profile_on_tiny_llava(tmp_path, tiny_checkpoints):
    llava_json, image_root = write_llava_mix(tmp_path / "llava")
    pope, pope_images = write_pope(tmp_path / "pope")
    sets = SHRINK + [f"paper.model_path={tiny_checkpoints.checkpoint('llava')}", f"data.llava_json={llava_json}",
                     f"data.image_root={image_root}", f"paper.eval_jsonl={pope}", f"paper.eval_image_root={pope_images}"]
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
    assert evaluate["n_questions"] == 4
    for v in ("vanilla", "random", "vig"):
        for view in ("image", "blur"):
            assert 0 <= evaluate[f"{v}_pope_acc_{view}"] <= 100 and 0 <= evaluate[f"{v}_pope_yes_ratio_{view}"] <= 100
    assert "vig_minus_vanilla_pope_f1" in evaluate


def test_vig_paper_preflight_names_the_missing_key_in_one_line(tmp_path, tiny_checkpoints):
    from components.common.preflight import PreflightError
    from components.vig.config import VigConfig

    with pytest.raises(PreflightError, match=r"^paper\.model_path = '' is not set") as err:
        VigConfig.for_profile("paper").preflight()
    assert "\n" not in str(err.value)
    llava_json, image_root = write_llava_mix(tmp_path / "llava")
    paths = {"paper": {"model_path": str(tiny_checkpoints.checkpoint("llava"))},
             "data": {"llava_json": str(llava_json), "image_root": str(image_root)}}
    with pytest.raises(PreflightError, match=r"^paper\.eval_jsonl = '' is not set"):
        VigConfig.for_profile("paper", paths).preflight()
    paths["paper"]["model_path"] = str(tiny_checkpoints.checkpoint("llama"))
    with pytest.raises(PreflightError, match="paper.model_path .* not 'llava'"):
        VigConfig.for_profile("paper", paths).preflight()
    VigConfig.for_profile("small").preflight()          # the small profile needs no paths
