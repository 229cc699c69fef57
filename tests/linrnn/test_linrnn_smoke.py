"""linrnn smoke profile end to end through the runtime (DVC + Prefect + MLflow)."""
from __future__ import annotations

import pytest

from flows.runtime.testing import run_in_temp_project


@pytest.mark.smoke
def test_linrnn_smoke_end_to_end(tmp_path):
    result = run_in_temp_project("linrnn", tmp_path / "proj", profile="smoke")
    assert len(result.executed) == 8           # 5 single stages, 2 RingWorld variants x 1 seed, evaluate
    metrics = result.metrics("linrnn", "evaluate")
    premise = result.metrics("linrnn", "ringworld_premise")
    assert premise["min_start_moves"] >= 3 and premise["memory_gap"] >= 0.2
    for variant in ("alf_direct", "lru"):
        assert -1.0 <= metrics[f"ringworld_{variant}_auc"] <= 1.0
    assert metrics["normalised_rate_max_ci_low"] <= metrics["normalised_rate_max"] <= metrics["normalised_rate_max_ci_high"]
    assert metrics["gated_criteria_pass"] == 1.0, metrics
    assert metrics["xi"] == pytest.approx(0.7206014, abs=1e-6)
    assert 0 < metrics["p_alf_log_max_inv_eps"] < metrics["p_alf_log_min_inv_eps"] < 0.2
    evaluate_dir = result.out("linrnn", "evaluate")
    assert (evaluate_dir / "two_state_error.png").stat().st_size > 1000
    assert (evaluate_dir / "claims.json").is_file()
