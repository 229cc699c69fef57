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
    assert math.isfinite(result.metrics("artist", "sft", "0")["final_loss"])
    rl = result.metrics("artist", "rl", "0")
    assert 0 <= rl["last_consistency"] <= 1 and 0 <= rl["last_rounds"] <= 4
    assert -2.0 <= rl["last_reward"] <= 5.0

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
    assert (result.out("artist", "report") / "accuracy_by_family.png").exists()

    again = run_in_temp_project("artist", tmp_path / "project", profile="smoke")
    assert again.executed == []
