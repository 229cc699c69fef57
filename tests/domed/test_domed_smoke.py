"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke

METHODS = ("erm", "erm_ts", "ensemble", "domed", "domed_beta0", "end2_only", "kd_seen")


def test_domed_smoke_end_to_end(tmp_path):
    from components.common.io import load_torch
    from components.domed.train import PREDICTIONS
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("domed", tmp_path / "project", profile="smoke")
    fold = "5-0"  # smoke: test domain 75 degrees, seed 0

    aggregate = result.metrics("domed", "aggregate")
    for method in METHODS:
        for name in ("acc", "nll", "ece", "prr", "auroc"):
            assert math.isfinite(aggregate[f"{method}/{name}"]), (method, name)
        assert 0 <= aggregate[f"{method}/acc"] <= 100 and 0 <= aggregate[f"{method}/ece"] <= 1
    assert aggregate["folds"] == 1 and {"D1_pass", "D2_pass", "D3_pass", "D4_pass"} <= set(aggregate)

    # better than chance (10 classes) even at smoke size, so the models did train
    assert aggregate["erm/acc"] > 20 and aggregate["domed/acc"] > 20

    # the stored unseen mask: no teacher scores its own domain, and the test domain is absent
    pred = load_torch(result.out("domed", "teacher_predict", fold) / PREDICTIONS)
    taus = pred["unseen"]["teachers"]
    assert 5 not in set(pred["domain"].tolist())
    for d, row in zip(pred["domain"].tolist(), pred["unseen"]["mask"].tolist()):
        assert row == [d not in tau for tau in taus]

    # a second run is a no-op: every stage is up to date
    again = run_in_temp_project("domed", tmp_path / "project", profile="smoke")
    assert again.executed == []
