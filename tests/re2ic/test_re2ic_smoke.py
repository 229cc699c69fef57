"""re2ic smoke profile end to end through the runtime (DVC + Prefect + MLflow)."""
from __future__ import annotations

import math

import pytest

from flows.runtime.testing import run_in_temp_project


@pytest.mark.smoke
def test_re2ic_smoke_end_to_end(tmp_path):
    result = run_in_temp_project("re2ic", tmp_path / "proj", profile="smoke")
    # decode fans out like fit_codec: per (loss, seed), (1 test + 1 validation crop) x 1 lambda
    for item in ("mse-0", "wawd-0"):
        decode = result.metrics("re2ic", "decode", item)
        assert decode["n_decoded"] == 2 and decode["all_bit_exact"] == 1.0
    metrics = result.metrics("re2ic", "evaluate")
    assert metrics["all_bit_exact"] == 1.0
    assert 0.05 < metrics["mean_bpp"] < 24
    assert 0 < metrics["macs_per_pixel"] < 3000
    assert metrics["hific_macs_per_pixel"] == 675445 and 0 < metrics["macs_fraction_of_hific"] < 0.01
    for loss in ("mse", "wawd"):
        assert 5 < metrics[f"mean_psnr_{loss}"] < 60
        assert math.isfinite(metrics[f"mean_wd_{loss}"]) and metrics[f"mean_wd_{loss}"] >= 0
    assert -1 <= metrics["c_min_spearman_wawd"] <= 1
    # the premise quantities are measured on the validation crop
    assert metrics["val_wawd_objective_ratio"] > 0 and 0 <= metrics["val_max_hf_ratio_mse"]
    assert math.isfinite(metrics["max_fit_tail_change"])
    out = result.out("re2ic", "evaluate")
    assert (out / "claims.json").is_file()
    assert (out / "rate_distortion.png").stat().st_size > 1000
    assert (out / "fit_curves.png").stat().st_size > 1000
    assert (out / "metrics.parquet").is_file()
