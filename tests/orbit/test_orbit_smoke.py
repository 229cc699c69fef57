"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_orbit_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("orbit", tmp_path / "project", profile="smoke")

    cases = result.metrics("orbit", "build_cases")
    assert (cases["n_train"], cases["n_test"]) == (60, 30) and cases["n_seed_pool"] > 0
    rubrics = result.metrics("orbit", "generate_rubrics")
    assert rubrics["cases_without_rubric"] == 0 and rubrics["items_max"] <= 20
    assert result.metrics("orbit", "difficulty_filter")["n_kept"] > 0

    for variant in ("orbit_curriculum", "orbit_all", "generic"):
        train = result.metrics("orbit", "grpo_train", f"{variant}-0")
        # RL moves the policy: the score on its own training rubric goes up
        assert train["final_full_rubric_score"] > train["first_full_rubric_score"], variant

    responses = read_table(result.out("orbit", "evaluate") / "responses.parquet").to_pandas()
    assert set(responses.policy) == {"base", "orbit_curriculum-0", "orbit_all-0", "generic-0"}
    assert responses.score.map(math.isfinite).all()
    results = read_json(result.out("orbit", "evaluate") / "results.json")
    for r in results.values():
        assert 0.0 <= r["overall"]["score"] <= 1.0 and r["overall"]["bootstrap_std"] >= 0.0

    agree = result.metrics("orbit", "judge_agreement")
    assert -1.0 <= agree["kappa_heldout"] <= 1.0 and agree["n_judgements"] > 0
    report = result.metrics("orbit", "report")
    assert {"c1_pass", "c2_pass", "c3_pass"} <= set(report)
    assert (result.out("orbit", "report") / "scores.png").exists()

    again = run_in_temp_project("orbit", tmp_path / "project", profile="smoke")
    assert again.executed == []
