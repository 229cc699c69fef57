"""fr3d smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_fr3d_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("fr3d", tmp_path / "project", profile="smoke")
    # 1 gen + 8 render (6 domain splits, 2 pre-training shards) + teacher + tokens + 1 fr3d
    # + 2 baselines + 1 eval + report
    assert len(result.executed) == 16
    assert {result.metrics("fr3d", "render", f"pretrain_{k}")["n_seq"] for k in (0, 1)} == {12}

    assert result.metrics("fr3d", "render", "kitti_like")["valid_share"] > 0.5
    assert math.isfinite(result.metrics("fr3d", "pretrain_teacher")["final_loss"])
    assert math.isfinite(result.metrics("fr3d", "train_forecaster", "0")["final_loss"])
    tokens = result.metrics("fr3d", "extract_tokens")
    assert tokens["n_turning"] >= 0 and math.isfinite(tokens["P1_depth_ratio"])
    assert math.isfinite(result.metrics("fr3d", "train_forecaster", "0")["val_last_quarter_drop"])

    scores = read_table(result.out("fr3d", "rollout_eval", "0") / "scores.parquet").to_pandas()
    assert set(scores.split) == {"test", "kitti_like", "nuscenes_like"}
    assert set(scores.method) == {"oracle", "copy_last", "const_vel", "fr3d", "no_share",
                                  "feat2d", "feat2d_copy_last", "gt_copy_last", "gt_const_vel"}
    assert set(scores.horizon) == {1, 5, 10}
    depth = scores.dropna(subset=["absrel"])
    assert set(depth.method) == {"oracle", "copy_last", "fr3d", "no_share", "feat2d",
                                 "feat2d_copy_last", "gt_copy_last"}
    assert depth.absrel.between(0, 10).all() and depth.delta1.between(0, 1).all()
    pose = scores.dropna(subset=["ate"])
    assert set(pose.method) == {"oracle", "copy_last", "const_vel", "fr3d", "no_share",
                                "gt_const_vel"}
    assert pose.ate.map(math.isfinite).all()

    criteria = read_json(result.out("fr3d", "report") / "criteria.json")
    assert {"F1_pass", "F2_pass", "F3_pass", "F4_pass", "F5_pass", "P3_pass"} <= set(criteria)
    assert (result.out("fr3d", "report") / "absrel_vs_horizon.png").exists()

    again = run_in_temp_project("fr3d", tmp_path / "project", profile="smoke")
    assert again.executed == []
