"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_tricd_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from components.tricd.evaluate import VARIANTS
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("tricd", tmp_path / "project", profile="smoke")

    bench = result.metrics("tricd", "build_benchmark")
    assert bench["test_n_qa"] > 100 and abs(bench["test_yes_rate"] - 0.5) < 0.2
    assert math.isfinite(result.metrics("tricd", "train_backbone")["final_loss"])
    assert 0.0 <= result.metrics("tricd", "eval_base")["test_macro"] <= 1.0
    policy = result.metrics("tricd", "train_policy", "0")
    assert policy["updates"] >= 1 and 0.0 <= policy["best_val_macro"] <= 1.0

    out = read_json(result.out("tricd", "evaluate", "0") / "results.json")
    assert set(out["variants"]) == set(VARIANTS)
    for scores in out["variants"].values():
        assert 0.0 <= scores["macro"] <= 1.0 and set(scores) >= {"acc_s_yn", "acc_c_mc", "type_camera"}
    assert out["router"]["best_tool_on_val"] in out["router"]["val_tool_macro"]
    preds = read_table(result.out("tricd", "evaluate", "0") / "preds.parquet").to_pandas()
    assert len(preds) == bench["test_n_qa"]
    assert set(preds.base) <= {"yes", "no", "A", "B", "C"}

    report = result.metrics("tricd", "report")
    assert {"c1_pass", "c2_pass", "c3_pass", "c4_pass", "tricd_macro"} <= set(report)
    criteria = read_json(result.out("tricd", "report") / "criteria.json")
    assert criteria["n_seeds"] == 1

    again = run_in_temp_project("tricd", tmp_path / "project", profile="smoke")
    assert again.executed == []
