"""linrnn smoke profile end to end through the runtime (DVC + Prefect + MLflow)."""
from __future__ import annotations

import pytest

from flows.runtime.testing import run_in_temp_project


@pytest.mark.smoke
def test_linrnn_smoke_end_to_end(tmp_path):
    result = run_in_temp_project("linrnn", tmp_path / "proj", profile="smoke")
    assert len(result.executed) == 7
    metrics = result.metrics("linrnn", "evaluate")
    assert metrics["gated_criteria_pass"] == 1.0, metrics
    assert metrics["xi"] == pytest.approx(0.7206014, abs=1e-6)
    assert 0 < metrics["p_alf_log_max_inv_eps"] < metrics["p_alf_log_min_inv_eps"] < 0.2
    evaluate_dir = result.out("linrnn", "evaluate")
    assert (evaluate_dir / "two_state_error.png").stat().st_size > 1000
    assert (evaluate_dir / "claims.json").is_file()
