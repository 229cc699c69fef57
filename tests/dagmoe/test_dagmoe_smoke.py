"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_dagmoe_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("dagmoe", tmp_path / "project", profile="smoke")

    corpus = result.metrics("dagmoe", "build_corpus")
    assert corpus["train_tokens"] > 50_000 and corpus["val_id_tokens"] > 5_000
    assert corpus["val_ood_tokens"] > 5_000

    for variant in ("moe", "moe_shared", "dag_moe"):
        train = result.metrics("dagmoe", "train", f"{variant}-0")
        assert math.isfinite(train["train_loss_final"])
        assert train["train_loss_final"] < train["train_loss_first"]  # it learned
        assert train["param_gap_dag_vs_shared"] <= 0.05
        assert math.isfinite(train["val_curve_final"])  # the validation curve was logged

    table = read_table(result.out("dagmoe", "evaluate") / "evaluation.parquet").to_pylist()
    assert {(r["variant"], r["seed"]) for r in table} == {("moe", 0), ("moe_shared", 0), ("dag_moe", 0)}
    for row in table:  # better than a uniform guess over the vocabulary
        assert math.isfinite(row["val_ood_loss"]) and row["val_id_loss"] < math.log(corpus["vocab_size"])

    routing = read_json(result.out("dagmoe", "analyze_routing") / "routing.json")
    gates = routing["runs"]["dag_moe-0"]["layers"][0]["round0"]
    assert 0 < gates["mean_gate"] < 1

    compare = result.metrics("dagmoe", "compare")
    assert {"C1_wins_all_seeds_both_splits", "C2_pass", "C3_pass", "reproduced",
            "shared_vs_plain/val_id_gain_mean", "dag_vs_plain/val_ood_wins"} <= set(compare)

    again = run_in_temp_project("dagmoe", tmp_path / "project", profile="smoke")
    assert again.executed == []
