"""The smoke profile end to end through the runtime (temp project: DVC + Prefect + MLflow)."""
import math

import pytest

pytestmark = pytest.mark.smoke


def test_dibilps_smoke_end_to_end(tmp_path):
    import numpy as np

    from components.common.io import read_json, read_table
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("dibilps", tmp_path / "project", profile="smoke")

    masks = result.metrics("dibilps", "make_masks", "poisson")
    assert masks["n_observed"] == round(0.03 * masks["grid_nodes"])

    with np.load(result.out("dibilps", "infer", "poisson") / "preds.npz") as z:
        assert z["latent-full-forward-0"].shape == (4, 2, 16, 16)
        assert z["latent-full-inverse-0-hr"].shape == (4, 2, 31, 31)
        assert all(np.isfinite(z[k]).all() for k in z.files)

    runs = read_json(result.out("dibilps", "infer", "poisson") / "runs.json")
    guided = [r for r in runs if r["sampler"] == "latent" and r["variant"] == "no_pde"]
    assert guided and all(r["obs_loss_last"] < r["obs_loss_first"] for r in guided)

    table = read_table(result.out("dibilps", "evaluate") / "metrics.parquet").to_pandas()
    latent = table[table.method == "latent_diffusion"]
    assert set(zip(latent.variant, latent.direction)) == {
        (v, d) for v in ("full", "no_pde", "no_obs", "no_guidance", "no_early_exit")
        for d in ("forward", "inverse")}
    assert {"interp_solve", "interp_diff", "regressor", "pixel_diffusion"} <= set(table.method)
    assert latent.error.map(math.isfinite).all() and latent.residual.map(math.isfinite).all()

    premise = read_json(result.out("dibilps", "infer", "poisson") / "premise.json")
    assert set(premise) == {"forward", "inverse"}
    assert all(set(v) == {"conditional", "unconditional", "zero"} for v in premise.values())
    assert premise["forward"]["zero"] == 1.0          # rel-L2 of predicting zero

    infer = result.metrics("dibilps", "infer", "poisson")
    assert infer["cost_latent_side"] == 8 and infer["cost_res"] == 64
    assert infer["cost_latent_macs_per_step"] > 0 and infer["cost_pixel_macs_per_step"] > 0

    report = result.metrics("dibilps", "report")
    for c in ("c1", "c2", "c3", "c4"):
        assert report[f"{c}_pass"] in (0.0, 1.0)
    for p in ("p1_worst_prior_vs_zero", "p2_worst_prior_vs_unconditional",
              "p3_min_tps_input_error", "p4_zeta_obs_interior_share", "c2_worst_ratio"):
        assert math.isfinite(report[p]), p
    assert (result.out("dibilps", "report") / "errors.png").exists()

    again = run_in_temp_project("dibilps", tmp_path / "project", profile="smoke")
    assert again.executed == []
