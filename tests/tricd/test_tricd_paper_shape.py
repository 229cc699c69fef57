"""tricd's paper profile end to end (runtime: DVC + Prefect + MLflow) on a tiny random Qwen2-VL
built from its config class, a tiny DINOv2 and a tiny OmniVCHall release (two generated mp4
files, the four question files of each split); steps shrunk by --set."""
import math

import pytest

from components.common.io import read_json
from tests.paper.harness import run_paper_shape
from tests.tricd.paper_fixtures import FRAME, write_omnivchall, write_tiny_dino, write_tiny_qwen2_vl

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]   # ~75 s on one core

SHRINK = [
    "seeds=[0]", "paper.device=cpu", "paper.num_frames=4", f"paper.frame_size={FRAME}", "paper.batch_size=4",
    "saliency.pool_px=4", "policy.grad_accum=2", "policy.max_epochs=1", "policy.min_epochs=1",
    "policy.d_router=16", "policy.n_queries=2", "policy.gater_hidden=[8,4]", "policy.lr=0.01",
]


def test_tricd_paper_profile_on_tiny_qwen2_vl_and_the_omnivchall_layout(tmp_path, tiny_checkpoints):
    from components.tricd.evaluate import VARIANTS

    model = write_tiny_qwen2_vl(tmp_path / "qwen2-vl", tiny_checkpoints.tokenizer())
    dino = write_tiny_dino(tmp_path / "dino")
    data = write_omnivchall(tmp_path / "MyBench")
    sets = SHRINK + [f"paper.model_path={model}", f"paper.data_root={data}", f"paper.dino_path={dino}"]
    result = run_paper_shape("tricd", tmp_path / "project", sets)

    bench = result.metrics("tricd", "build_benchmark")
    assert (bench["test_n_qa"], bench["test_n_videos"], bench["val_n_qa"]) == (4, 2, 4)
    assert result.metrics("tricd", "train_backbone")["trained"] == 0.0
    base = result.metrics("tricd", "eval_base")
    for key in ("test_macro", "val_isolated_macro", "test_acc_s_yn", "test_acc_c_mc"):
        assert 0.0 <= base[key] <= 1.0
    assert "heldout_biased_macro" not in base                 # no pretrain split at paper scale
    policy = result.metrics("tricd", "train_policy", "0")
    assert policy["updates"] == 2 and 0.0 <= policy["best_val_macro"] <= 1.0

    out = read_json(result.out("tricd", "evaluate", "0") / "results.json")
    assert set(out["variants"]) == set(VARIANTS)
    for scores in out["variants"].values():
        assert {"acc_s_yn", "acc_c_yn", "acc_s_mc", "acc_c_mc", "macro", "type_camera"} <= set(scores)
        assert 0.0 <= scores["macro"] <= 1.0
    assert len(out["router"]["freq"]) == 8 and 0.0 <= out["router"]["beta_mean"] <= 1.0
    report = result.metrics("tricd", "report")
    assert {"c1_gain", "c2_gain", "c3_gain", "c4_gap", "tricd_macro", "base_macro"} <= set(report)
    assert math.isfinite(report["tricd_macro"])
