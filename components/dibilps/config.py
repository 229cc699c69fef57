"""Params of the Di-BiLPS reproduction. Defaults are the ``small`` profile.

Di-BiLPS (ICML 2026): a VAE compresses the joint field (u, a) to a latent, a contrastively
trained point-set encoder embeds the sparse observations, a latent diffusion model conditioned
on those tokens plus a direction token (+1 forward: sparse a -> u, -1 inverse: sparse u -> a)
generates the joint latent, and a VP/DDIM sampler with observation- and PDE-residual guidance
and early exit turns it into a solver. Values quoted from the official code are marked [code].
"""
from __future__ import annotations

from typing import ClassVar, Literal

from components.common.config import MethodConfig, Section

PDES = ("poisson", "darcy", "helmholtz")


class Data(Section):
    pdes: list[Literal["poisson", "darcy", "helmholtz"]] = ["poisson", "darcy"]
    res: int = 32                  # grid nodes per side, boundary nodes included
    sr_factor: int = 2             # test_hr is solved on a (sr_factor * (res-1) + 1)... see data.py
    n_train: int = 800
    n_val: int = 24                # guidance weights and premises are measured here, never on test
    n_test: int = 24
    # spectral decay, calibrated on val (CLAIMS.md): 2.0 (the notes) is so smooth that thin-plate
    # interpolation from 3 % of nodes already recovers the inputs; 1.5 is the smoothest value
    # tried where it does not (val error >= 0.15 on both PDEs)
    grf_alpha: float = 1.5         # spectral filter (pi^2 |k|^2 + tau^2)^(-alpha/2)
    grf_tau: float = 3.0
    grf_modes: int = 16            # cosine modes per axis: the field is defined off-grid too
    helmholtz_k: float = 1.0       # k^2 far from the first Dirichlet eigenvalue 2 pi^2
    # v4 committed run on fresh draws: seed 0 (v2's data) is the dev seed its knobs were set on;
    # seed 1 was v3's pre-registered draw (never run), left unused
    seed: int = 2


class Masks(Section):
    obs_fraction: float = 0.03     # 31 of 32^2 nodes; 500 of 128^2 in the paper [code]
    seed: int = 8765               # one fixed mask per val/test sample, shared by every method


class VAE(Section):
    latent_channels: int = 4       # [code] 4 latent channels; 32^2 -> 4 x 8 x 8 here
    width: int = 16                # 16 / 32 / 64 channels at n, n/2, n/4
    feature_channels: int = 32     # feature map the continuous decoder samples bilinearly
    fourier_freqs: int = 4         # coordinate features sin/cos(pi f x), f = 1..F
    kl_weight: float = 1.0e-6      # [code]
    steps: int = 400
    batch_size: int = 16
    lr: float = 2.0e-3
    seed: int = 0


class CondEncoder(Section):
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    embed_dim: int = 64
    temperature_init: float = 0.07     # logit scale log(1/0.07) [code]
    steps: int = 300
    batch_size: int = 64
    lr: float = 1.0e-3
    seed: int = 0


class Diffusion(Section):
    """VP diffusion shared by the latent model and the pixel-space baseline."""
    train_timesteps: int = 1000                 # [code]
    beta_start: float = 0.00085                 # scaled_linear [code]
    beta_end: float = 0.012
    latent_channels: int = 32       # latent UNet: 32 / 64 channels at 8^2 / 4^2, cross-attention
    pixel_channels: int = 16        # pixel UNet: 16 / 32 / 32 channels at 32^2 / 16^2 / 8^2
    # v4, calibrated on the dev seed (CLAIMS.md): 1200 steps had not converged (loss still
    # falling); at 2000 steps and lr 3e-3 the last fifth of the loss equals the fifth before
    latent_steps: int = 2000
    # the same training wall time as the latent denoiser: measured 0.055 s per pixel step vs
    # 0.043 s per latent step (towers and lifting included) on one core
    pixel_steps: int = 1600
    cond_dropout: float = 0.1       # rows trained with the null token: the unconditional prior
    finetune_encoder: bool = True   # the diffusion loss also trains the point-set towers
    # v3: the observations lifted to the latent grid (kernel mean + density) are concatenated to
    # the denoiser's input; cross-attention to point tokens alone was ignored (v1, v2)
    spatial_condition: bool = True
    # Gaussian kernel sigma = lift_width / sqrt(observed points); v4: 0.25 (dev seed, val) beat
    # 0.5 and 1.0: a narrow kernel keeps each observation on its own latent pixel
    lift_width: float = 0.25
    batch_size: int = 16
    lr: float = 3.0e-3              # v4 (dev seed): 3e-3 beat 1.5e-3; shared by the pixel baseline
    seed: int = 0


class Guidance(Section):
    """PDE-informed DDIM. Weights are picked per sampler and direction on the validation split
    (never on test): zeta_obs from its grid with zeta_pde = 0 (the no_pde optimum), then
    zeta_pde from its grid at that zeta_obs (the full variant). The paper's Darcy-forward
    defaults are zeta_obs = 20, zeta_pde = 1 at 128^2 [code]."""
    steps: int = 20                              # DDIM steps (200 in the paper)
    early_exit_frac: float = 0.9                 # [code]
    # wide geometric grids so that the validation optimum can be interior (checked: premise P4)
    zeta_obs_grid: list[float] = [0.5, 2.0, 8.0, 32.0, 128.0]
    # v2's optimum sat at the top (100) in 3 of 4 cells: the grid moved up one decade for v3
    zeta_pde_grid: list[float] = [1.0, 10.0, 100.0, 1000.0]
    double_obs_step: bool = False                # the official pipeline subtracts the obs step twice
    variants: list[str] = ["full", "no_pde", "no_obs", "no_guidance", "no_early_exit"]
    batch_size: int = 32


class Baselines(Section):
    regressor_width: int = 16
    regressor_steps: int = 200
    regressor_batch_size: int = 16
    regressor_lr: float = 2.0e-3
    rbf_kernel: str = "thin_plate_spline"
    seed: int = 0


class Evaluate(Section):
    timing_batch: int = 16
    timing_repeats: int = 3
    cost_res: int = 64             # MACs per guided step compared at 64^2 fields -> 8^2 latents
    cost_down: int = 3
    cost_steps: int = 3            # steps per timed trajectory at cost_res


class Paper(Section):
    """Where the paper profile's data come from, which model family the stages build, and on
    which device they run. ``backbone = "own"`` keeps the repository's conv models (smoke,
    small); ``"diffusers"`` builds the official families from diffusers config classes
    (AutoencoderKL VAE, UNet2DConditionModel latent denoiser, UNet2DModel pixel baseline)
    with the widths below [code: configs/<pde>/VAE_config.json, unet_diff.json].

    Data layouts under ``data_root`` (nothing is downloaded):
    - ``diffusionpde``: DiffusionPDE's published MATLAB files as unzipped from its
      training.zip / testing.zip, ``training/<pde>/*.mat`` and ``testing/<pde>.mat``
      (darcy: thresh_a_data, thresh_p_data; poisson: f_data, phi_data; helmholtz: f_data,
      psi_data; arrays (N, S, S); v7.3 files need h5py);
    - ``npz``: ``<pde>/train.npz`` and ``<pde>/test.npz`` with arrays ``a``, ``u`` (N, S, S),
      optionally ``<pde>/test_hr.npz`` on the nested 2x grid.
    A validation split is cut from the head of the training data."""
    enabled: bool = False
    data_root: str = ""
    layout: Literal["diffusionpde", "npz"] = "diffusionpde"
    backbone: Literal["own", "diffusers"] = "own"
    device: str = "cpu"                      # "auto" (paper): CUDA when visible, else CPU
    vae_block_out_channels: list[int] = [128, 256, 512, 512]     # 128^2 -> 16^2 latent [code]
    vae_layers_per_block: int = 2
    unet_block_out_channels: list[int] = [320, 640, 1280, 1280]  # SD UNet [code]
    unet_layers_per_block: int = 2
    attention_head_dim: int = 8
    pixel_block_out_channels: list[int] = [128, 256, 256, 256]
    norm_num_groups: int = 32


class DibilpsConfig(MethodConfig):
    # sampling seeds of every diffusion sampler (v2: 0, 1, 2; v3 pre-registered 3, 4, 5, never run)
    seeds: list[int] = [6, 7, 8]
    data: Data = Data()
    masks: Masks = Masks()
    vae: VAE = VAE()
    cond_encoder: CondEncoder = CondEncoder()
    diffusion: Diffusion = Diffusion()
    guidance: Guidance = Guidance()
    baselines: Baselines = Baselines()
    evaluate: Evaluate = Evaluate()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"pdes": ["poisson"], "res": 16, "n_train": 48, "n_val": 3, "n_test": 4},
        "vae": {"steps": 15, "width": 8, "feature_channels": 8, "batch_size": 8},
        "cond_encoder": {"steps": 10, "d_model": 16, "embed_dim": 16, "n_layers": 1,
                         "batch_size": 16},
        "diffusion": {"latent_steps": 20, "pixel_steps": 10, "latent_channels": 8,
                      "pixel_channels": 8, "batch_size": 8},
        "guidance": {"steps": 4, "zeta_obs_grid": [10.0], "zeta_pde_grid": [1.0]},
        "baselines": {"regressor_steps": 10, "regressor_width": 8, "regressor_batch_size": 8},
        "evaluate": {"timing_batch": 2, "timing_repeats": 1},
    }
    PAPER: ClassVar[dict] = {
        "data": {"pdes": ["poisson", "darcy", "helmholtz"], "res": 128, "n_train": 50_000,
                 "n_val": 100, "n_test": 1000},
        "vae": {"width": 128, "feature_channels": 64, "steps": 100_000, "batch_size": 64,
                "lr": 1.0e-4},
        "cond_encoder": {"d_model": 768, "n_layers": 6, "n_heads": 16, "embed_dim": 768,
                         "steps": 150_000, "lr": 5.0e-5},
        "diffusion": {"latent_channels": 320, "pixel_channels": 128, "latent_steps": 30_000,
                      "pixel_steps": 30_000,
                      "batch_size": 128, "lr": 1.0e-4},
        "masks": {"obs_fraction": 500 / 128**2},          # 500 observed nodes of 128^2 [code]
        "guidance": {"steps": 200, "batch_size": 100},
        "baselines": {"regressor_width": 64, "regressor_steps": 30_000, "regressor_batch_size": 128},
        "evaluate": {"cost_res": 128, "cost_down": 3, "timing_batch": 8},
        "paper": {"enabled": True, "backbone": "diffusers", "device": "auto"},
    }

    def preflight(self) -> None:
        from components.dibilps.paper_data import check_backbone, check_data_root

        check_backbone(self.paper)
        if self.paper.enabled:
            check_data_root(self.paper, self.data.pdes)
