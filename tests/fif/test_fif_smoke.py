"""fif smoke profile end to end through the runtime (DVC + Prefect + MLflow)."""
from __future__ import annotations

import json

import pytest

from flows.runtime.testing import run_in_temp_project


@pytest.mark.smoke
def test_fif_smoke_end_to_end(tmp_path):
    result = run_in_temp_project("fif", tmp_path / "proj", profile="smoke")
    assert len(result.executed) == 4 * 2 + 1  # four per-seed stages x (dev + test seed), evaluate
    assert result.metrics("fif", "embed", "0")["dim"] == 384
    metrics = result.metrics("fif", "evaluate")
    for method in ("dense", "bm25", "lilac_like", "ircot_like", "fif", "fif_no_backtrack",
                   "fif_no_escalation", "always_max"):
        assert 0.0 <= metrics[f"{method}/R@10"] <= 100.0
        assert metrics[f"{method}/MRR@10"] <= metrics[f"{method}/R@10"] + 1e-9
    assert metrics["fif/calls"] > 0 and metrics["dense/calls"] == 0
    assert metrics["fif/R@10"] > metrics["dense/R@10"]  # multi-hop answers need the graph
    out = result.out("fif", "evaluate")
    results = json.loads((out / "results.json").read_text())
    assert set(results["criteria"]) >= {"G1_pass", "G2_pass", "G3_pass", "dev_fif_no_backtrack_R10",
                                        "dev_fif_near_misses"}
    assert set(results["dev"][0]) == {"fif", "fif_no_backtrack"}  # the dev seed runs the premise arms only
    assert "backtracks" in results["mean"]["fif"] and "escalations" in results["mean"]["fif"]
    assert (out / "recall_vs_tokens.png").stat().st_size > 1000
