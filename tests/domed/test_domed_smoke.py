"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke

METHODS = ("erm", "erm_ts", "ensemble", "eoa", "domed", "domed_beta0", "end2_only", "kd_seen")
TEST_ENV = 5  # smoke: one test domain per benchmark, seed 0


def test_domed_smoke_end_to_end(tmp_path):
    from components.common.io import load_torch
    from components.domed.data import BENCHMARKS
    from components.domed.train import PREDICTIONS
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("domed", tmp_path / "project", profile="smoke")
    aggregate = result.metrics("domed", "aggregate")
    for benchmark in BENCHMARKS:
        for method in METHODS:
            for name in ("acc", "nll", "ece", "prr", "auroc"):
                assert math.isfinite(aggregate[f"{benchmark}/{method}/{name}"]), (benchmark, method, name)
            assert 0 <= aggregate[f"{benchmark}/{method}/acc"] <= 100
        assert aggregate[f"{benchmark}/folds"] == 1
        assert {f"{benchmark}/{c}_pass" for c in ("P1", "P2", "D1", "D2", "D3", "D4")} <= set(aggregate)
        assert math.isfinite(aggregate[f"{benchmark}/premise/premise_acc_ratio"])
        # better than chance (10 classes) even at smoke size, so the models did train
        assert aggregate[f"{benchmark}/erm/acc"] > 20 and aggregate[f"{benchmark}/domed/acc"] > 20

        # the stored unseen mask: no teacher scores its own domain, and the test domain is absent
        pred = load_torch(result.out("domed", "teacher_predict", f"{benchmark}-0") / PREDICTIONS)[TEST_ENV]
        taus = pred["unseen"]["teachers"]
        assert TEST_ENV not in set(pred["domain"].tolist())
        for d, row in zip(pred["domain"].tolist(), pred["unseen"]["mask"].tolist()):
            assert row == [d not in tau for tau in taus]

    # a second run is a no-op: every stage is up to date
    again = run_in_temp_project("domed", tmp_path / "project", profile="smoke")
    assert again.executed == []
