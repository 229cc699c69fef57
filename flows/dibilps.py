"""dibilps — "Di-BiLPS: Denoising induced Bidirectional Latent-PDE-Solver under Sparse
Observations" (ICML 2026). Poisson and Darcy on 32^2 from our own solvers, 3 % observations:
VAE with a continuous decoder, contrastive point-set encoder, latent diffusion with a direction
token, PDE-informed guided DDIM with early exit, against classical and pixel-space baselines.
The paper profile runs the same stages on DiffusionPDE's published 128^2 data with diffusers
AutoencoderKL / UNet2DConditionModel / UNet2DModel networks (the ``paper`` section)."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.dibilps"
PER_PDE = {"pde": "data.pdes"}
# training and guided sampling want a GPU at paper scale (128^2, SD-sized UNet); none otherwise
GPU = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="dibilps",
    title="Guided latent diffusion for forward and inverse PDEs from 3 % observations",
    paper="https://icml.cc/virtual/2026/poster/60564",
    config=f"{M}.config:DibilpsConfig",
    stages=(
        Stage("generate_pde_data", f"{M}.data:generate_pde_data_stage", params=("data", "paper"),
              fan_out=PER_PDE, description="GRF inputs, FD solutions; train/val/test + 2x test_hr"),
        Stage("make_masks", f"{M}.data:make_masks_stage", params=("masks",),
              deps=("generate_pde_data",), fan_out=PER_PDE,
              description="One fixed 3 % observation mask per val/test sample"),
        Stage("train_vae", f"{M}.train:train_vae_stage", params=("vae", "paper"),
              deps=("generate_pde_data",), fan_out=PER_PDE, resources=GPU,
              description="VAE (u, a) -> 4x8x8 latent, continuous coordinate decoder"),
        Stage("train_cond_encoder", f"{M}.train:train_cond_encoder_stage",
              params=("cond_encoder", "masks", "paper"), deps=("generate_pde_data",), fan_out=PER_PDE,
              resources=GPU,
              description="Point-set towers for sparse u / sparse a, symmetric InfoNCE"),
        Stage("encode_latents", f"{M}.train:encode_latents_stage", params=("paper",),
              deps=("generate_pde_data", "train_vae"), fan_out=PER_PDE, resources=GPU,
              description="Posterior means of the train split, scaled to unit std"),
        Stage("train_latent_diffusion", f"{M}.train:train_latent_diffusion_stage",
              params=("diffusion", "masks", "paper"),
              deps=("generate_pde_data", "train_cond_encoder", "encode_latents"), fan_out=PER_PDE,
              resources=GPU,
              description="ε-prediction UNet on latents, cross-attention to obs tokens + direction token"),
        Stage("train_pixel_diffusion", f"{M}.train:train_pixel_diffusion_stage",
              params=("diffusion", "paper"), deps=("generate_pde_data",), fan_out=PER_PDE,
              resources=GPU,
              description="Baseline: unconditional pixel-space (u, a) diffusion, same schedule"),
        Stage("infer", f"{M}.infer:infer_stage",
              params=("data", "guidance", "diffusion", "evaluate", "seeds", "vae", "cond_encoder",
                      "masks", "paper"),
              deps=("generate_pde_data", "make_masks", "train_vae", "train_cond_encoder",
                    "encode_latents", "train_latent_diffusion", "train_pixel_diffusion"),
              fan_out=PER_PDE, resources=GPU,
              description="Guidance calibrated on val; variants x directions x seeds on test; SR; timing"),
        Stage("baselines", f"{M}.baselines:baselines_stage",
              params=("data", "masks", "baselines", "paper"),
              deps=("generate_pde_data", "make_masks"), fan_out=PER_PDE, resources=GPU,
              description="Interpolate-then-solve, interpolate-then-differentiate, masked regressor"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("data",),
              deps=("generate_pde_data", "make_masks", "infer", "baselines"),
              description="Rel-L2 / error rate, PDE residual, wall time, 2x SR error"),
        Stage("report", f"{M}.report:report_stage", deps=("evaluate", "infer", "baselines"),
              description="Pass criteria of CLAIMS.md, table, plots"),
    ),
)
