"""decodertcr smoke profile end to end through the runtime (DVC + Prefect + MLflow)."""
from __future__ import annotations

import math

import pytest

from flows.runtime.testing import run_in_temp_project


@pytest.mark.smoke
def test_decodertcr_smoke_end_to_end(tmp_path):
    result = run_in_temp_project("decodertcr", tmp_path / "proj", profile="smoke")
    # 3 data stages + pretrain(1 seed) + train(3 variants x 1 cap) + score(1 seed: every model)
    # + generate(1) + 2 evals + report
    assert len(result.executed) == 12
    score = result.out("decodertcr", "score", "0")
    assert sorted(p.name for p in score.iterdir()) == ["curriculum-10", "marginal_only-10",
                                                       "paired_only-10"]
    paired = result.metrics("decodertcr", "build_paired")
    assert paired["n_train"] > 0 and paired["n_test_tcr"] > 0 and paired["n_test_epitope"] > 0
    disc = result.metrics("decodertcr", "evaluate_discrimination")
    for variant in ("curriculum", "paired_only", "marginal_only"):
        assert 0.0 <= disc[f"test_tcr/{variant}/b10/macro_auroc"] <= 1.0
    gen = result.metrics("decodertcr", "evaluate_generation")
    for method in ("iegr", "one_shot", "left_to_right"):
        assert 0.0 <= gen[f"{method}/energy_percentile"] <= 100.0
        assert math.isfinite(gen[f"{method}/model_pll"]) and gen[f"{method}/model_pll"] < 0
    report = result.metrics("decodertcr", "report")
    assert report["criteria_gated"] == 2
    assert 0.0 <= paired["oracle_greedy_suboptimal_fraction"] <= 1.0
    assert 0.0 <= disc["val/marginal_only/macro_auroc"] <= 1.0
    # premises P1a / P1b and the reported zero-shot R0
    assert 0.0 <= paired["premise_interface_compat_macro_auroc"] <= 1.0
    assert 0.0 <= disc["premise/marginal_only/train_val_macro_auroc"] <= 1.0
    for key in ("probe_corr", "probe_init_corr", "probe_corr_tcr", "probe_corr_pep"):
        assert -1.0 <= disc[f"premise/marginal_only/{key}"] <= 1.0
    assert (result.out("decodertcr", "report") / "claims.json").is_file()
