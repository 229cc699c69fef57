"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_ioadam_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("ioadam", tmp_path / "project", profile="smoke")

    sweep = result.metrics("ioadam", "sweep_digits", "ioadam_b4")
    assert sweep["best_lr"] in (3e-3, 3e-2)
    train = result.metrics("ioadam", "train_digits", "ioadam_b4-0")
    assert train["val_acc"] > 0.5                       # trained well above chance (10 classes)

    mem = read_table(result.out("ioadam", "memory_profile") / "memory.parquet").to_pylist()
    by = {(r["task"], r["optimizer"]): r for r in mem}
    for task in ("digits", "charlm"):
        assert by[(task, "ioadam_b4")]["state_bytes_matrix"] < by[(task, "adam")]["state_bytes_matrix"]
        assert by[(task, "ioadam_b4")]["grad_bytes"] < by[(task, "ioadam_b4_ref")]["grad_bytes"]
        assert all(math.isfinite(by[(task, o)]["total_peak_bytes"]) for o in ("adam", "ioadam_b4"))

    results = read_table(result.out("ioadam", "evaluate") / "results.parquet").to_pylist()
    assert {(r["task"], r["optimizer"]) for r in results} == {
        ("digits", "adam"), ("digits", "ioadam_b4"), ("charlm", "adam"), ("charlm", "ioadam_b4"), ("charlm", "sgdm")}
    assert all(math.isfinite(r["test"]) for r in results)

    compare = result.metrics("ioadam", "compare")
    assert compare["C1/digits/ioadam_b4/pass"] is True   # state formula holds at any scale
    assert "all_pass" in compare
    report = read_json(result.out("ioadam", "compare") / "report.json")
    assert {"P1", "P2", "C2/ioadam_b4", "C3/ioadam_b4", "R1/charlm/ioadam_b4"} <= set(report["checks"])
    assert report["checks"]["R1/charlm/ioadam_b4"]["timed_repeats"] == 2

    again = run_in_temp_project("ioadam", tmp_path / "project", profile="smoke")
    assert again.executed == []
