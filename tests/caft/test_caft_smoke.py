"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def check_outputs(metrics, out) -> None:
    """Shared assertions on a finished smoke run; metrics(stage, key) / out(stage, key)."""
    from components.common.io import load_torch, read_json, read_table

    assert metrics("build_data", None)["n_train"] == 300
    subspace = load_torch(out("concept_subspace", None) / "subspace.pt")
    assert set(subspace) == {2, 3, 4, 5}  # the cached layer-2 output is hooked too
    k_star = metrics("concept_subspace", None)["k_total"]
    base = metrics("pretune", "0")
    for variant in ("caft", "random"):
        runs = [metrics("caft_train", f"{variant}-{p}-0") for p in (50, 100)]
        assert runs[1]["k"] == k_star >= runs[0]["k"]  # both arms of a point have the same k
        for m in (base, *runs):
            assert 0 <= m["id_acc"] <= 1 and 0 <= m["val_ood_intended_acc"] <= 1
            assert math.isclose(m["ood_intended_acc"] + m["ood_spurious_rate"], 1.0, abs_tol=1e-6)
    assert base["id_acc"] > 0.9  # standard fine-tuning learns the (ambiguous) task
    summary = read_json(out("evaluate", None) / "summary.json")
    assert {"standard_ft", "caft_k50", "caft_k100", "random_k50", "random_k100"} <= set(summary["summary"])
    assert set(summary["headline"]) == {"caft_gain_at_kstar", "random_gain_at_kstar",
                                        "caft_minus_random_at_kstar", "id_gap_at_kstar"}
    table = read_table(out("evaluate", None) / "per_seed.parquet").to_pylist()
    assert {(r["variant"], r["percent"]) for r in table} == {
        ("standard_ft", 0), ("caft", 50), ("caft", 100), ("random", 50), ("random", 100)}


def test_caft_smoke_end_to_end(tmp_path):
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("caft", tmp_path / "project", profile="smoke")
    check_outputs(lambda stage, key: result.metrics("caft", stage, key),
                  lambda stage, key: result.out("caft", stage, key))
    again = run_in_temp_project("caft", tmp_path / "project", profile="smoke")
    assert again.executed == []  # everything cached by DVC
