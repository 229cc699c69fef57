"""The lr sweep's widening rule and the v2 criteria arithmetic (premise gap in seed std, gain share)."""
import math
from types import SimpleNamespace

import pytest

from components.ioadam.report import check_criteria, gain_share, pooled_sd, premise_gap
from components.ioadam.training import widening_sweep

CRIT = SimpleNamespace(state_saving_min=0.45, premise_gap_sd_min=2.0, gain_share_min=0.5,
                       lm_loss_ratio_max=1.03, acc_gap_max_points=1.0, sgd_margin_points=2.0)


def _sweep(best: float, grid, max_widen=3):
    calls = []

    def score(lr):
        calls.append(lr)
        return {"val_loss": abs(math.log10(lr) - math.log10(best))}

    return widening_sweep(grid, score, lambda r: (r["val_loss"],), max_widen), calls


def test_sweep_widens_past_the_upper_edge_until_the_best_is_interior():
    result, calls = _sweep(best=1.0, grid=[0.01, 0.1])
    assert result["grid"] == [0.01, 0.1, 1.0, 10.0] and result["widened"] == 2
    assert result["best_lr"] == 1.0 and result["interior"]
    assert calls == [0.01, 0.1, 1.0, 10.0]            # each lr scored once


def test_sweep_widens_downwards_and_stops_at_max_widen():
    result, _ = _sweep(best=1e-6, grid=[1e-3, 1e-2, 1e-1], max_widen=2)
    assert result["grid"] == [1e-5, 1e-4, 1e-3, 1e-2, 1e-1]
    assert result["best_lr"] == 1e-5 and not result["interior"]


def test_sweep_interior_best_adds_nothing_and_one_point_is_never_interior():
    result, calls = _sweep(best=0.03, grid=[0.01, 0.03, 0.1])
    assert result["interior"] and result["widened"] == 0 and len(calls) == 3
    single, _ = _sweep(best=0.03, grid=[0.03])
    assert not single["interior"] and single["widened"] == 0


def test_pooled_sd_and_premise_gap_against_hand_numbers():
    adam = {"mean": 2.0, "std": 0.03, "n": 3}
    sgdm = {"mean": 2.2, "std": 0.04, "n": 3}
    assert pooled_sd(adam, sgdm) == pytest.approx(math.sqrt((0.03 ** 2 + 0.04 ** 2) / 2))
    gap = premise_gap({"adam": {"val": adam}, "sgdm": {"val": sgdm}}, CRIT)
    assert gap["gap_in_sd"] == pytest.approx(0.2 / math.sqrt(0.00125)) and gap["pass"]
    close = premise_gap({"adam": {"val": adam}, "sgdm": {"val": {**sgdm, "mean": 2.05}}}, CRIT)
    assert not close["pass"]                          # 0.05 / 0.035 = 1.4 sd < 2
    one_seed = {"mean": 2.0, "std": 0.0, "n": 1}
    assert math.isnan(pooled_sd(one_seed, one_seed))


def test_gain_share_is_the_fraction_of_adams_lead_kept():
    assert gain_share(io=2.1, adam=2.0, sgdm=2.2) == pytest.approx(0.5)
    assert gain_share(io=1.9, adam=2.0, sgdm=2.2) == pytest.approx(1.5)      # better than Adam
    assert gain_share(io=2.3, adam=2.0, sgdm=2.2) < 0
    assert math.isnan(gain_share(io=2.0, adam=2.0, sgdm=2.0))


def test_check_criteria_gates_lm_quality_and_reports_premises():
    def run(task, opt, seed, val, test, state):
        return {"task": task, "optimizer": opt, "seed": seed, "lr": 0.01, "val": val, "test": test,
                "test_ppl": math.exp(test), "state_bytes_matrix": state, "state_bytes_total": state}

    results = [run("charlm", o, s, v + 0.01 * s, v + 0.01 * s, st)
               for o, v, st in (("adam", 2.0, 200), ("ioadam_b4", 2.02, 104), ("sgdm", 2.3, 100)) for s in range(3)]
    memory = [{"task": "charlm", "optimizer": o, "formula_state_bytes_matrix": st, "total_peak_bytes": pk,
               "total_peak_bytes_saving_vs_adam": 1 - pk / 1000, "step_time_ratio_vs_adam": 1.1, "timed_repeats": 20}
              for o, st, pk in (("adam", 200, 1000), ("ioadam_b4", 104, 900))]
    sweeps = {"adam": {"best_lr": 0.01, "interior": True}, "sgdm": {"best_lr": 1.0, "interior": False}}
    checks = check_criteria(results, memory, CRIT, sweeps)["checks"]
    assert checks["P1"]["pass"] and checks["P1"]["gap_in_sd"] == pytest.approx(30.0)
    assert not checks["P2"]["pass"] and checks["P2"]["sgdm_lr"] == 1.0
    assert checks["C1/charlm/ioadam_b4"]["pass"]
    assert checks["C2/ioadam_b4"]["gain_share"] == pytest.approx(0.28 / 0.3) and checks["C2/ioadam_b4"]["pass"]
    assert checks["C3/ioadam_b4"]["pass"] and checks["R1/charlm/ioadam_b4"]["timed_repeats"] == 20
