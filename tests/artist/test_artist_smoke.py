"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_artist_smoke_end_to_end(tmp_path):
    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("artist", tmp_path / "project", profile="smoke")

    assert result.metrics("artist", "generate_tasks") == {"n_train": 400, "n_val": 100, "n_test": 100}
    traces = result.metrics("artist", "build_sft_traces")
    assert 0 < traces["mean_zooms"] <= 4
    assert traces["geometry_determined_share"] == 0.0
    assert 0 <= traces["val_coarse_chance"] < traces["val_coarse_candidate_precision"] <= 1
    sft = result.metrics("artist", "sft", "0")
    assert math.isfinite(sft["final_loss"])
    assert 0 <= sft["val_oracle_acc_localize"] <= 1 and 0 <= sft["val_oracle_acc_rhythm"] <= 1
    rl = result.metrics("artist", "rl", "0")
    assert 0 <= rl["last_consistency"] <= 1 and 0 <= rl["last_rounds"] <= 4
    assert -2.0 <= rl["last_reward"] <= 5.0
    assert rl["first_explore_weight"] > 0 and rl["final_explore_weight"] == 0.0   # annealed in-run

    table = read_table(result.out("artist", "evaluate", "0") / "metrics.parquet").to_pandas()
    assert set(table.system) == {"artist_rl", "artist_sft", "random_ctrl", "oracle", "static",
                                 "stats_gbm", "uniform"}
    assert set(table.family) == {"localize", "rhythm"}
    assert table.acc.between(0, 1).all() and table.fraction_read.between(0, 1).all()
    static = table[table.system == "static"]
    assert (static.fraction_read == 0).all()       # the static model zooms into nothing

    criteria = read_json(result.out("artist", "report") / "criteria.json")
    for key in ("C1_pass", "C2_pass", "C3_pass", "C4_pass"):
        assert criteria[key] in (0.0, 1.0)
    assert 0 <= criteria["P1_val_oracle_acc_worst"] <= 1      # localize is the smoke's zoom family
    assert criteria["P2_val_coarse_candidate_precision"] == traces["val_coarse_candidate_precision"]
    assert (result.out("artist", "report") / "accuracy_by_family.png").exists()

    again = run_in_temp_project("artist", tmp_path / "project", profile="smoke")
    assert again.executed == []
