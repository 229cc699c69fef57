"""vig smoke profile end to end through the runtime (DVC + Prefect + MLflow)."""
from __future__ import annotations

import json

import pytest

from flows.runtime.testing import run_in_temp_project


@pytest.mark.smoke
def test_vig_smoke_end_to_end(tmp_path):
    result = run_in_temp_project("vig", tmp_path / "proj", profile="smoke")
    assert len(result.executed) == 6 + 3        # six plain stages + 3 arms x 1 seed
    select = result.metrics("vig", "select")
    assert 0 < select["token_fraction"] < 1
    assert select["kept_multimodal"] > 0
    metrics = result.metrics("vig", "evaluate")
    for arm in ("vanilla", "random", "vig"):
        for key in ("acc_conflict_image", "acc_aligned_image", "acc_conflict_blur"):
            assert 0.0 <= metrics[f"{arm}_{key}"] <= 100.0
    # same budget in steps; the random control is matched to VIG in supervised tokens
    assert metrics["vig_supervised_tokens"] < metrics["vanilla_supervised_tokens"]
    assert metrics["random_supervised_tokens"] == metrics["vig_supervised_tokens"]
    for key in ("vanilla_val_acc_conflict_image", "vanilla_val_prior_rate_blur", "vig_recall_min"):
        assert 0.0 <= metrics[key] <= 100.0
    assert 0.0 <= result.metrics("vig", "score_vig")["ref_val_prior_rate_blur"] <= 100.0
    assert 0.0 <= select["colour_kept_min"] <= 1.0
    for key in ("vig_match", "vig_partial", "vig_conflict", "d_grounded_mean"):
        assert metrics[key] == metrics[key]     # finite, not NaN
    evaluate_dir = result.out("vig", "evaluate")
    claims = json.loads((evaluate_dir / "claims.json").read_text())
    assert set(claims["criteria"]) >= {"a_match_gt_partial_gt_0_gt_conflict", "b_beats_vanilla_on_conflict",
                                       "p_vision_uncertain", "p_blur_follows_prior",
                                       "b_fewer_tokens", "c_larger_blur_gap", "b_beats_random_on_conflict"}
    assert (evaluate_dir / "accuracy_vs_tokens.png").stat().st_size > 1000
    confusion = json.loads((evaluate_dir / "confusion.json").read_text())
    for arm in ("vanilla", "random", "vig"):
        cm = confusion[f"{arm}/image"]
        assert len(cm) == 6 and sum(map(sum, cm)) == 200     # 200 smoke test questions x 1 seed
    assert (result.out("vig", "score_vig") / "vig_tokens.parquet").stat().st_size > 0
