"""dibilps' paper profile end to end (runtime: DVC + Prefect + MLflow) on tiny diffusers
AutoencoderKL / UNet2DConditionModel / UNet2DModel configs and 16^2 data written in
DiffusionPDE's published MATLAB layout; steps shrunk by --set."""
import math

import numpy as np
import pytest

from components.common.io import load_torch, read_json, read_table
from tests.dibilps.paper_layout import write_diffusionpde
from tests.paper.harness import run_paper_shape

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]

SHRINK = [
    "seeds=[0]", "data.pdes=[poisson,darcy]", "data.res=16", "data.n_train=24", "data.n_val=3",
    "data.n_test=4", "masks.obs_fraction=0.03",
    "vae.steps=3", "vae.batch_size=4", "vae.feature_channels=8",
    "cond_encoder.steps=3", "cond_encoder.d_model=16", "cond_encoder.embed_dim=16",
    "cond_encoder.n_layers=1", "cond_encoder.batch_size=8",
    "diffusion.latent_steps=3", "diffusion.pixel_steps=3", "diffusion.batch_size=4",
    "guidance.steps=3", "guidance.zeta_obs_grid=[10.0]", "guidance.zeta_pde_grid=[1.0]",
    "guidance.batch_size=2",
    "baselines.regressor_steps=2", "baselines.regressor_width=8", "baselines.regressor_batch_size=4",
    "evaluate.timing_batch=2", "evaluate.timing_repeats=1", "evaluate.cost_res=16",
    "evaluate.cost_down=1", "evaluate.cost_steps=2",
    "paper.device=cpu", "paper.norm_num_groups=4", "paper.attention_head_dim=4",
    "paper.vae_block_out_channels=[8,16]", "paper.vae_layers_per_block=1",
    "paper.unet_block_out_channels=[16,32]", "paper.unet_layers_per_block=1",
    "paper.pixel_block_out_channels=[8,16]",
]


def test_dibilps_paper_profile_on_tiny_diffusers_models_and_diffusionpde_layout(tmp_path):
    root = write_diffusionpde(tmp_path / "diffusionpde", pdes=("poisson", "darcy"), res=16,
                              n_train=30, n_test=6)
    result = run_paper_shape("dibilps", tmp_path / "project", SHRINK + [f"paper.data_root={root}"])

    data = result.metrics("dibilps", "generate_pde_data", "darcy")
    assert (data["n_train"], data["n_test"], data["res"], data["hr_res"]) == (24, 4, 16, 31)
    assert data["gt_residual"] < 1e-6          # the fixture is solved with our own stencil
    assert result.metrics("dibilps", "make_masks", "poisson")["n_observed"] == 8

    for stage, name, arch in (("train_vae", "vae.pt", "DiffusersFieldVAE"),
                              ("train_latent_diffusion", "latent_unet.pt", "DiffusersLatentDenoiser"),
                              ("train_pixel_diffusion", "pixel_unet.pt", "DiffusersPixelUNet")):
        assert load_torch(result.out("dibilps", stage, "darcy") / name)["arch"] == arch
    assert result.metrics("dibilps", "encode_latents", "poisson")["latent_shape"] == [4, 8, 8]

    with np.load(result.out("dibilps", "infer", "poisson") / "preds.npz") as z:
        assert z["latent-full-forward-0"].shape == (4, 2, 16, 16)
        assert z["latent-full-inverse-0-hr"].shape == (4, 2, 31, 31)
        assert z["pixel-full-forward-0"].shape == (4, 2, 16, 16)
        assert all(np.isfinite(z[k]).all() for k in z.files)
    infer = result.metrics("dibilps", "infer", "darcy")
    assert infer["cost_latent_side"] == 8 and infer["cost_latent_macs_per_step"] > 0

    table = read_table(result.out("dibilps", "evaluate") / "metrics.parquet").to_pandas()
    latent = table[table.method == "latent_diffusion"]
    assert set(latent.pde) == {"poisson", "darcy"} and latent.error.map(math.isfinite).all()
    assert {"interp_solve", "interp_diff", "regressor", "pixel_diffusion"} <= set(table.method)
    report = result.metrics("dibilps", "report")
    for c in ("c1", "c2", "c3", "c4"):
        assert report[f"{c}_pass"] in (0.0, 1.0)
    assert read_json(result.out("dibilps", "infer", "darcy") / "premise.json").keys() == {"forward", "inverse"}
