"""calibrate_v7's judging (k-order P4, set barriers / distances, noise summary) on synthetic rows."""
import math

import pytest

from tests.selfsoup.calibrate_v7 import judge, noise_summary, order_seed


def _row(seed, stock, a, b, barrier_ab, noise):
    return {"seed": seed, "val": {"stock": stock, "a": a, "b": b},
            "barrier": {"a__b": barrier_ab}, "distance": {"a__b": 0.2}, "encoder_distance": {"a__b": 0.03},
            "noise_distance": noise, "noise_encoder_distance": noise, "ft_seconds_per_order": 1.0}


def test_order_zero_is_the_pipeline_seed():
    assert order_seed(100, 0) == 100
    assert len({order_seed(s, o) for s in range(100, 109) for o in range(3)}) == 27


def test_judge_uses_k_order_means_for_p4_and_order_zero_beside_it():
    rows = [_row(100, [50, 60, 70], [55, 55, 55], [70, 70, 70], 0.2, [0.01, 0.02]),
            _row(101, [40, 40, 40], [44, 44, 44], [30, 50, 70], -0.1, [0.015, 0.01])]
    j = judge(rows, ["a", "b"])
    # a: (55 - 60) and (44 - 40) -> mean -0.5; one order: (55 - 50), (44 - 40) -> +4.5
    assert j["P4_k"]["a"] == pytest.approx(-0.5) and j["P4_order0"]["a"] == pytest.approx(4.5)
    assert j["P4_k_min"] == pytest.approx(-0.5) and j["P4_k_argmin"] == "a"
    assert j["P2_barrier_mean"] == pytest.approx(0.05) and j["P1_distance_min"] == 0.2


def test_noise_summary_k_mean_is_sqrt_k_tighter():
    rows = [_row(100, [50, 52, 54], [60, 62, 64], [70, 72, 74], 0.0, [0.01, 0.019])]
    n = noise_summary(rows)
    assert n["val_sd_one_order"] == pytest.approx(2.0)
    assert n["gap_sd_k_mean"] == pytest.approx(round(2.0 * math.sqrt(2 / 3), 2))
    assert n["noise_distance_max"] == 0.019 and n["val_range_max"] == 4
