"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def check_outputs(metrics, out) -> None:
    """Shared assertions on a finished smoke run; metrics(stage, key) / out(stage, key)."""
    from components.common.io import read_json, read_table

    assert metrics("build_data", None)["n_train"] == 300
    base = metrics("pretune", "0")
    for variant in ("caft", "random"):
        run = metrics("caft_train", f"{variant}-0")
        assert run["k"] == metrics("interpret", "0")["k_selected"]  # controls use the same k
        for m in (base, run):
            assert 0 <= m["id_acc"] <= 1 and 0 <= m["ood_intended_acc"] <= 1
            assert math.isclose(m["ood_intended_acc"] + m["ood_spurious_rate"], 1.0)
    assert base["id_acc"] > 0.9  # standard fine-tuning learns the (ambiguous) task
    directions = out("find_directions", "0") / "directions.pt"
    assert directions.exists()
    assert (out("interpret", "0") / "displays.json").exists()
    summary = read_json(out("evaluate", None) / "summary.json")
    assert {"standard_ft", "caft", "random"} <= set(summary["summary"])
    assert "precondition_baseline_follows_spurious" in summary["criteria"]
    table = read_table(out("evaluate", None) / "per_seed.parquet").to_pylist()
    assert {r["variant"] for r in table} == {"standard_ft", "caft", "random"}


def test_caft_smoke_end_to_end(tmp_path):
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("caft", tmp_path / "project", profile="smoke")
    check_outputs(lambda stage, key: result.metrics("caft", stage, key),
                  lambda stage, key: result.out("caft", stage, key))
    again = run_in_temp_project("caft", tmp_path / "project", profile="smoke")
    assert again.executed == []  # everything cached by DVC
