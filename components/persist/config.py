"""Params of the persist reproduction. Defaults are the ``small`` profile (CPU scale).

Paper values ([3P] = from a third-party read of the paper, see CLAIMS.md) are noted beside the
CPU-scale ones. Only sizes and backends differ between profiles; the stage code is the same.
"""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from components.common.config import MethodConfig, Section
from components.common.preflight import PreflightError


class World(Section):
    backend: Literal["numpy_voxel", "craftium"] = "numpy_voxel"
    size: int = 48                  # world is size x size x height voxels
    height: int = 16
    crop: int = 16                  # agent-centred world frame: crop x crop x height (paper 48^3)
    stride: int = 4                 # latent stride of the 3D VAE (paper 48 -> 12)
    n_train_worlds: int = 24
    n_eval_worlds: int = 6          # held out: never seen in training
    n_val_worlds: int = 4           # held out too: premise checks and calibration, never test
    n_trees: int = 28
    n_pillars: int = 22             # landmark pillars: revisits carry distinctive content
    water: bool = True
    frame: int = 32                 # frames are frame x frame RGB (paper 360x640)
    fov_deg: float = 70.0
    yaw_step_deg: float = 15.0      # one yaw action; a full spin is 360 / yaw_step_deg steps
    world_seed: int = 5000          # world i uses world_seed + i; eval worlds follow the train ones (v6 fresh; v5 3000, v1-v4 1000, v6 dev 4100)


class Rollout(Section):
    episodes_per_world: int = 6
    steps: int = 48                 # actions per training episode
    policy_mix: dict[str, float] = {"free": 0.5, "lookaround": 0.25, "orbit": 0.25}
    eval_probe_episodes: int = 36        # memory probe: landmark placed in view, full spin (test)
    val_probe_episodes: int = 24         # the same on the validation worlds (premises only)
    probe_distance: float = 3.0          # probe pillar this far in front of the spawn pose
    # v4: this fraction of training episodes starts with a close landmark pillar in view: the
    # probe's close-up (up to ~20 % of the frame) is otherwise rare in training (CLAIMS.md)
    train_near_pillar_frac: float = 0.25   # v4 (calibrated on validation, CLAIMS.md); v3 0
    probe_width: int = 1                 # probe pillar footprint (width x width columns)
    probe_height: int = 3
    eval_free_episodes: int = 6
    eval_free_steps: int = 64
    eval_uniform_episodes: int = 4       # control: the spin in a flat all-grass world
    seed: int = 2                        # v6 fresh (v5 1, v1-v4 0)


class Vae3d(Section):
    """3D conv autoencoder over one-hot voxel crops, cross-entropy on the labels (paper:
    TRELLIS-style 3D-ResNet, 48^3 x 2138 classes -> 12^3 x 48, 138M params)."""
    arch: Literal["conv", "patch"] = "patch"  # v3; "conv" (v1/v2) carried no landmark voxel (CLAIMS.md)
    latent_channels: int = 32       # 8 carried no landmark voxel at all (CLAIMS.md, calibration)
    width: int = 16
    steps: int = 800                # v3 (calibrated, CLAIMS.md); v2 400
    batch_size: int = 16
    lr: float = 2e-3
    class_weight_power: float = 0.5  # CE weights freq^-power (calibrated on validation, CLAIMS.md)
    # augmentation (v3): the training worlds hold few landmark pillars, always in the same places
    # and colours, so a VAE can memorise their colour from the context instead of encoding it
    augment: bool = True            # per sample: random landmark-colour permutation, xy flips/transpose
    insert_pillars: int = 8         # per sample: this many 1x1x3 landmark pillars stood on the surface (v4; v3 4)
    seed: int = 2                   # v6 fresh (v5 1, v1-v4 0)


class WorldModel(Section):
    """W_theta: transformer over latent voxel tokens with absolute XYZ embeddings, AdaLN for
    action/camera/noise level, cross-attention to patch tokens (+ Plücker rays) of the latest
    frame; rectified flow with diffusion forcing (paper: DiT, 686M, K=8, 20 steps)."""
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    patch: int = 4
    context: int = 1                # past world frames given to W (paper K=8)
    p_drop_history: float = 0.15    # learn o_0 -> w_0 (single-image 3D init); paper: supported
    frame_noise: float = 0.1        # cross-component noise on O when training W (paper 10 %)
    ctx_noise_max: float = 0.3      # diffusion forcing: context noise level ~ U(0, max) in training
    tau_ctx: float = 0.02           # context noise level at inference (paper 0.02)
    steps: int = 500
    batch_size: int = 32
    lr: float = 1e-3
    recentre_by_camera: bool = True  # CPU-scale shortcut: roll w by the integer crop shift
    residual: bool = True           # v5: W's flow runs on w_t - w_{t-1} (valid cells; 0 elsewhere): the state persists unless W changes it


class CameraModel(Section):
    """C_theta: residual camera dynamics from past cameras, actions and the inner latent
    (paper: 1D causal transformer, K_C=8, 234M)."""
    context: int = 4
    hidden: int = 128
    steps: int = 2000               # v6 (calibrated on dev, CLAIMS.md); v1-v5 400
    batch_size: int = 64
    lr: float = 2e-3
    # v6: the rotation residual from the past cameras and actions only; the world latent feeds the
    # position residual alone (v5's single MLP drifted ~87 deg in yaw over a spin on dev)
    split_rotation: bool = True


class Dit(Section):
    """diffusers ``DiTTransformer2DModel`` sizes for ``pixel_model.arch = dit`` (paper profile:
    22 blocks of DiT-L width 16 heads x 64, ~474M with P's input channels; the paper's P 460M)."""
    layers: int = 22
    heads: int = 16
    head_dim: int = 64
    patch: int = 10                 # 360 / 10 = 36 tokens a side (the paper's 2D-VAE patch is 10)


class PixelModel(Section):
    """P_theta (deferred shader) and the pixel-history baseline: one U-Net rectified-flow
    denoiser in pixel space at 32x32 (no 2D VAE at this size; paper: causal DiT, 460M).
    ``persist`` conditions on w_2D (l layers x (classes + depth)) and the last 2 frames;
    ``baseline`` (Oasis-like) on the last ``baseline_context`` frames, same backbone and steps."""
    arch: Literal["unet", "dit"] = "unet"   # unet: PixelUNet (small); dit: diffusers DiT (paper)
    dit: Dit = Dit()
    layers: int = 2                 # depth-peeled layers of w_2D
    albedo: bool = True             # v3: w_2D also carries each layer's class colour (CLAIMS.md)
    albedo_residual: bool = True    # v4: P samples the residual on the first layer's colour (CLAIMS.md)
    persist_context: int = 2        # frames of pixel history given to P_theta
    baseline_context: int = 8       # K_P of the pixel-history baseline
    width: int = 16
    world_noise: float = 0.1        # cross-component noise on W when training P (paper 10 %)
    ctx_noise_max: float = 0.3
    tau_ctx: float = 0.1            # paper 0.1
    steps: int = 500
    batch_size: int = 16
    lr: float = 1e-3


class Evaluate(Section):
    rf_steps: int = 6               # Euler steps of the sampler (paper 20)
    eta: float = 3.0                # tau_k = eta k / (1 + (eta - 1) k) (paper 3)
    horizons: list[int] = [8, 32, 64]
    variants: list[str] = ["persist", "persist_w0", "oracle", "baseline", "copy_first"]
    edit_episodes: int = 12         # probe episodes re-used: a pillar edited in behind the agent (v4/v5 6)
    # rows (set:variant) not run; v4/v5 cut free:oracle, probe:oracle, free:persist_w0 for the CPU
    # budget, v6 runs the full protocol (none of them is read by a gated criterion)
    cut_rows: list[str] = []
    # v6: rollout_eval items per seed (evaluate.PARTS): the test probe rows / everything else
    parts: list[str] = ["probe", "rest"]


class Device(Section):
    device: str = "cpu"             # "auto" (paper profile): CUDA when visible (bf16 autocast), else CPU


class Paper(Section):
    """paper profile: the numpy voxel world at the paper's sizes (Craftium/Luanti is not on the
    package registries) and GPU training; nothing is downloaded."""
    enabled: bool = False
    data_root: str = ""             # Craftium trajectories; only with world.backend = craftium (not built)


def check_backend(world: World) -> None:
    """The only environment here is the numpy voxel world: Craftium/Luanti (the paper's) is not on
    the package registries, so its env and rasteriser backends are not built."""
    if world.backend != "numpy_voxel":
        raise PreflightError(
            "world.backend", world.backend, "'numpy_voxel' (the Craftium/Luanti engine is not on the package "
            "registries and its env and rasteriser backends are not built here)", "is not available")


class PersistConfig(MethodConfig):
    seeds: list[int] = [12, 13, 14]     # v6: fresh seeds (v1/v2 0-2, v3 3-5, v4 6-8, v5 9-11, dev 100; CLAIMS.md)
    world: World = World()
    rollout: Rollout = Rollout()
    vae3d: Vae3d = Vae3d()
    world_model: WorldModel = WorldModel()
    camera_model: CameraModel = CameraModel()
    pixel_model: PixelModel = PixelModel()
    evaluate: Evaluate = Evaluate()
    device: Device = Device()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "world": {"size": 24, "height": 12, "crop": 12, "n_train_worlds": 3, "n_eval_worlds": 1,
                  "n_val_worlds": 1, "n_trees": 6, "n_pillars": 6, "frame": 16, "yaw_step_deg": 90.0},
        "rollout": {"episodes_per_world": 3, "steps": 12, "eval_probe_episodes": 2,
                    "val_probe_episodes": 2, "eval_free_episodes": 2, "eval_free_steps": 8,
                    "eval_uniform_episodes": 1},
        "vae3d": {"steps": 20, "width": 8},
        "world_model": {"steps": 20, "d_model": 32, "n_layers": 1, "batch_size": 8},
        "camera_model": {"steps": 20, "hidden": 32},
        "pixel_model": {"steps": 20, "width": 8, "batch_size": 8},
        "evaluate": {"rf_steps": 2, "horizons": [2, 4, 8], "edit_episodes": 2},
    }
    PAPER: ClassVar[dict] = {
        # numpy voxel world at the paper's shapes: 48^3 agent-centred crop -> 12^3 x 48 latents,
        # square 360 x 360 frames (paper 360 x 640), data as large as in-memory npz stages hold
        "world": {"backend": "numpy_voxel", "size": 160, "height": 48, "crop": 48, "frame": 360,
                  "n_train_worlds": 250, "n_eval_worlds": 32, "n_val_worlds": 16,
                  "n_trees": 300, "n_pillars": 240},
        "rollout": {"episodes_per_world": 4, "steps": 48, "eval_probe_episodes": 128,
                    "val_probe_episodes": 64, "eval_free_episodes": 32, "eval_free_steps": 128,
                    "eval_uniform_episodes": 8},
        "vae3d": {"latent_channels": 48, "width": 192, "steps": 200_000, "batch_size": 64, "lr": 1e-4},
        # 1728 latent tokens (patch 1 over 12^3, as 3D-XL); 20 blocks of width 1152 ~ the paper's 686M
        "world_model": {"d_model": 1152, "n_layers": 20, "n_heads": 16, "patch": 10, "context": 8,
                        "steps": 300_000, "batch_size": 64, "lr": 1e-4, "recentre_by_camera": False},
        "camera_model": {"context": 8, "hidden": 2048, "steps": 100_000, "batch_size": 256, "lr": 1e-4,
                         "split_rotation": False},     # the paper profile keeps its v5 C (not re-tested)
        "pixel_model": {"arch": "dit", "persist_context": 16, "baseline_context": 16,
                        "steps": 300_000, "batch_size": 64, "lr": 1e-4},
        "evaluate": {"rf_steps": 20, "horizons": [8, 32, 64, 128], "edit_episodes": 64, "cut_rows": ["free:oracle"]},
        "device": {"device": "auto"},
        "paper": {"enabled": True},
    }

    def preflight(self) -> None:
        """One line naming the key, before anything runs (every profile: the checks are cheap)."""
        w, pm = self.world, self.pixel_model
        check_backend(w)
        if pm.arch == "dit" and w.frame % pm.dit.patch:
            raise PreflightError("pixel_model.dit.patch", str(pm.dit.patch),
                                 f"a divisor of world.frame = {w.frame}", "does not tile the frame")
        if w.frame % self.world_model.patch:
            raise PreflightError("world_model.patch", str(self.world_model.patch),
                                 f"a divisor of world.frame = {w.frame}", "does not tile the frame")
        if w.crop % w.stride or w.crop > w.size:
            raise PreflightError("world.crop", str(w.crop),
                                 f"a multiple of world.stride = {w.stride} no larger than world.size = {w.size}",
                                 "does not fit")
        self._preflight_device()

    def _preflight_device(self) -> None:
        device = self.device.device
        if device == "cpu" or (device == "auto" and not self.paper.enabled):
            return                      # no torch import for the small profile's check
        import torch

        if device == "auto" and not torch.cuda.is_available():
            raise PreflightError(
                "device.device", device, "'cpu' to run the paper-sized models (W 671M, P 474M) on "
                "the CPU anyway, or run on a CUDA machine", "finds no CUDA device")
        try:
            from components.common.devices import resolve_device

            resolve_device(device)
        except (RuntimeError, ValueError) as err:
            raise PreflightError("device.device", device, "'auto' or 'cpu'",
                                 f"is not usable ({' '.join(str(err).split())})") from None
