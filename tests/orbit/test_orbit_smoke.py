"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_orbit_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    # 30 GRPO steps of 4 x 4 rollouts at lr 1e-3 sit inside the noise; a stronger step makes the
    # "RL moves the policy" check meaningful at smoke size (the small profile keeps lr 1e-3)
    grpo = {"grpo": {"lr": 3e-3, "steps": 40}}
    result = run_in_temp_project("orbit", tmp_path / "project", profile="smoke", overrides=grpo)

    cases = result.metrics("orbit", "build_cases")
    assert (cases["n_train"], cases["n_test"]) == (60, 30) and cases["n_seed_pool"] > 0
    rubrics = result.metrics("orbit", "generate_rubrics")
    assert rubrics["cases_without_rubric"] == 0 and rubrics["items_max"] <= 20
    assert result.metrics("orbit", "difficulty_filter")["n_kept"] > 0

    base = result.metrics("orbit", "train_base")
    assert base["architecture"] == "Qwen3ForCausalLM"
    for variant in ("orbit_all", "generic"):
        train = result.metrics("orbit", "grpo_train", f"{variant}-0")
        # RL moves the policy: the score on the rubric it is rewarded on goes up
        assert train["final_full_rubric_score"] > train["first_full_rubric_score"], variant
    for variant in ("orbit_review", "orbit_admission"):   # curricula reward a window, not the full rubric
        train = result.metrics("orbit", "grpo_train", f"{variant}-0")
        assert 0.0 < train["mean_kept_frac"] <= 1.0 and 0.0 <= train["mastered_share"] <= 1.0, variant

    responses = read_table(result.out("orbit", "evaluate") / "responses.parquet").to_pandas()
    assert set(responses.policy) == {"base", "orbit_review-0", "orbit_admission-0", "orbit_all-0", "generic-0"}
    assert responses.score.map(math.isfinite).all()
    results = read_json(result.out("orbit", "evaluate") / "results.json")
    for r in results.values():
        assert 0.0 <= r["overall"]["score"] <= 1.0 and r["overall"]["bootstrap_std"] >= 0.0

    agree = result.metrics("orbit", "judge_agreement")
    assert -1.0 <= agree["kappa_heldout"] <= 1.0 and agree["n_judgements"] > 0
    report = result.metrics("orbit", "report")
    assert {"gain_vs_base", "gain_vs_generic", "c3_pass", "score_base_val", "premise_case_minus_generic_val",
            "axis_accuracy_base"} <= set(report)
    assert (result.out("orbit", "report") / "axis_table.md").exists()
    assert (result.out("orbit", "report") / "scores.png").exists()

    again = run_in_temp_project("orbit", tmp_path / "project", profile="smoke", overrides=grpo)
    assert again.executed == []
