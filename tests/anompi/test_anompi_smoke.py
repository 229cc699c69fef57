"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_anompi_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("anompi", tmp_path / "project", profile="smoke")

    perception = result.metrics("anompi", "pretrain_perception")
    assert math.isfinite(perception["final_loss"])
    passive = result.metrics("anompi", "passive_baselines")
    assert 0.0 < passive["min_ratio_to_bound"] <= passive["min_ratio_uniform"] + 1e-12
    assert -1.0 <= passive["oracle_headroom"] <= 1.0
    assert result.metrics("anompi", "rollout", "0")["n_trajectories"] == 60 * 4
    for variant in ("full", "no_info", "no_cost"):
        m = result.metrics("anompi", "train_idpo", f"{variant}-0")
        assert 0.0 <= m["train_acc"] <= 1.0 and m["train_frames"] <= 16

    results = read_table(result.out("anompi", "evaluate", "0") / "results.parquet").to_pandas()
    assert {"passive_uniform", "passive_pairs", "bound_uniform", "dense", "oracle_window", "script",
            "sft", "idpo_full", "idpo_no_info", "idpo_no_cost", "passive_uniform_eq", "passive_pairs_eq",
            "bound_pairs", "passive_uniform_shared_head"} <= set(results.policy)
    active = results[results.policy.str.startswith("idpo")]
    assert (active.frames <= 16).all() and active.accuracy.between(0, 1).all()
    dense = results[results.policy == "dense"]
    assert float(dense.frames.iloc[0]) == 64

    criteria = read_json(result.out("anompi", "report") / "criteria.json")
    assert {"a_pass", "b_pass", "c_pass", "d_pass", "uniform_ratio_to_bound_eq",
            "cross_seed_same_actions_sft"} <= set(criteria)
    assert criteria["cross_seed_same_actions_sft"] == 1.0        # one seed agrees with itself
    assert (result.out("anompi", "report") / "pareto.png").exists()

    again = run_in_temp_project("anompi", tmp_path / "project", profile="smoke")
    assert again.executed == []
