"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pandas as pd
import pytest

pytestmark = pytest.mark.smoke


def test_persist_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("persist", tmp_path / "project", profile="smoke")

    roll = result.metrics("persist", "rollout_env")
    assert roll["spin_return_cam_err"] == 0.0            # a full spin returns to the start pose
    assert 0 < roll["sky_fraction"] < 1
    lat = result.metrics("persist", "encode_latents")
    assert 0 <= lat["recon_voxel_acc"] <= 1
    for stage, key in (("train_world_model", "0"), ("train_camera_model", "0"),
                       ("train_pixel_model", "0"), ("train_baseline", "0")):
        assert math.isfinite(result.metrics("persist", stage, key)["final_loss"])

    ev = {**result.metrics("persist", "rollout_eval", "probe-0"), **result.metrics("persist", "rollout_eval", "rest-0")}
    # same pose in a static world: repeating o_0 scores exactly the classifier's own ceiling
    assert ev["copy_first_probe_acc_gt_t4"] == pytest.approx(ev["classifier_ceiling_acc"])
    assert ev["ground_truth_probe_probe_score"] > 0.9         # the colour reader on GT frames
    assert ev["ground_truth_edit_visible_t0_pixels"] == 0     # the edit is out of view at t = 0
    metrics = pd.concat([read_table(result.out("persist", "rollout_eval", f"{p}-0") / "metrics.parquet").to_pandas()
                         for p in ("probe", "rest")])
    assert set(metrics.variant) >= {"persist", "persist_w0", "oracle", "baseline", "copy_first"}
    assert metrics.value.map(math.isfinite).all() or metrics[~metrics.value.map(math.isfinite)].metric.eq("iou").all()
    crit = read_json(result.out("persist", "report") / "criteria.json")
    assert {"P1_oracle_val_probe_score", "P2_val_context_probe_pixels_max", "C1_pass", "C2_pass",
            "C3_pass"} <= set(crit)

    again = run_in_temp_project("persist", tmp_path / "project", profile="smoke")
    assert again.executed == []
