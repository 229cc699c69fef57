"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_steindiff_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("steindiff", tmp_path / "project", profile="smoke")

    verify = result.metrics("steindiff", "verify_stein")
    assert verify["n_failed"] == 0 and verify["n_checks"] >= 10

    assert result.metrics("steindiff", "train_feature_net")["test_acc"] > 0.5   # 10 classes
    assert math.isfinite(result.metrics("steindiff", "train_denoiser")["final_loss"])

    sample = result.metrics("steindiff", "sample_mixture", "heun-0")
    assert sample["gamma_mean"] >= 0.5                     # lower clip only (primary arm)
    assert 0.0 <= sample["gamma_clipped_frac"] <= 1.0

    metrics = read_table(result.out("steindiff", "evaluate") / "metrics.parquet").to_pandas()
    runs = metrics[metrics.solver != "true_samples"]
    oracle = {("mixture", "heun", 3, "oracle"), ("mixture", "heun", 5, "oracle"),
              ("digits", "heun", 3, "oracle")}
    assert set(zip(runs.dataset, runs.solver, runs.steps, runs.correction)) == {
        (d, s, n, c) for d in ("mixture", "digits") for s in ("euler", "heun")
        for n in (3, 5) for c in ("none", "stein", "stein_stepwise")} | oracle
    assert runs[runs.dataset == "mixture"].sw2.map(math.isfinite).all()
    assert runs[runs.dataset == "digits"].fd.map(math.isfinite).all()

    criteria = read_json(result.out("steindiff", "report") / "criteria.json")
    assert set(criteria["C1_sw2_ratio"]) == {"3", "5"}
    assert criteria["C1_pass"] is None          # N = 4 is not in the smoke grid: not judged
    report = result.metrics("steindiff", "report")
    assert "P1_n_gated" in report and "clip_frac_stein_mixture_heun_N3" not in report
    assert "clip_frac_stein_mixture_N3" in report
    assert (result.out("steindiff", "report") / "quality_vs_steps.png").exists()

    again = run_in_temp_project("steindiff", tmp_path / "project", profile="smoke")
    assert again.executed == []
