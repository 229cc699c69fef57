"""The paper profile's image denoiser: a diffusers ``UNet2DModel`` from a local folder, seen by
the samplers as an EDM denoiser ``D(x, σ)`` in the variance-exploding form ``x = x_0 + σ n``.

Two parameterisations of the network are supported:

- ``vp_eps``: a DDPM-style UNet trained on a discrete VP schedule (``ᾱ_t`` from the scheduler
  config saved beside it), predicting ε, v or the sample. The VE state maps to the VP one by
  ``x_VP = x / sqrt(1 + σ²)`` and ``σ = sqrt((1 - ᾱ) / ᾱ)``; the network's timestep is the
  training step whose σ matches, interpolated in log σ (the VP wrapper of EDM and k-diffusion).
  The public diffusers checkpoints (google/ddpm-*-256, CompVis/ldm-*) are of this kind.
- ``edm``: a UNet trained with EDM preconditioning, ``D = c_skip x + c_out F(c_in x; c_noise)``
  with ``c_noise = time_scale · ¼ ln σ`` fed as the UNet's timestep.

A latent model (an LDM) samples in the autoencoder's latent space; ``decode`` maps a finished
batch to pixels for the metrics. Folder layouts (what the preflight checks):

- a pipeline folder (``model_index.json``; ``unet/``, ``scheduler/``, optionally ``vqvae/`` or
  ``vae/``), or
- a bare UNet folder (``config.json`` naming ``UNet2DModel`` + weights), with
  ``scheduler_config.json`` beside it for ``vp_eps`` (the flat layout of google/ddpm-*).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from components.common.diffusion import edm_precond
from components.common.hf_models import CheckpointError, check_checkpoint, load_model, read_config
from components.common.preflight import PreflightError, require_checkpoint, require_dir

UNET_LAYOUT = ("a diffusers pipeline folder (model_index.json, unet/, scheduler/) or a "
               "UNet2DModel folder (config.json + diffusion_pytorch_model.safetensors)")
AUTOENCODERS = ("vqvae", "vae")       # LDM pipelines name their autoencoder one of these


@dataclass(frozen=True)
class CheckpointLayout:
    unet: Path
    scheduler_config: Path | None
    autoencoder: Path | None


def resolve_layout(root: Path, vae: str = "") -> CheckpointLayout:
    """Where the UNet, its scheduler config and an autoencoder live under ``root``."""
    pipeline = (root / "model_index.json").is_file()
    unet = root / "unet" if pipeline else root
    scheduler = [root / "scheduler" / "scheduler_config.json", root / "scheduler_config.json"]
    found = next((p for p in scheduler if p.is_file()), None)
    auto = next((root / name for name in AUTOENCODERS if pipeline and (root / name).is_dir()), None)
    return CheckpointLayout(unet, found, Path(vae).expanduser() if vae else auto)


def preflight_paper(paper) -> None:
    """Every paper path checked from config files only (no model is loaded)."""
    root = require_dir("paper.checkpoint", paper.checkpoint, UNET_LAYOUT)
    layout = resolve_layout(root, paper.vae)
    try:
        check_checkpoint(layout.unet)
        unet_config = read_config(layout.unet)
    except CheckpointError as err:
        raise PreflightError("paper.checkpoint", paper.checkpoint, UNET_LAYOUT,
                             f"is not a diffusers UNet ({str(err).split(': ', 1)[-1]})") from None
    if unet_config.get("_class_name") != "UNet2DModel":
        raise PreflightError("paper.checkpoint", paper.checkpoint, UNET_LAYOUT,
                             f"holds a {unet_config.get('_class_name')!r}, not a UNet2DModel")
    if paper.parameterization == "vp_eps" and layout.scheduler_config is None:
        raise PreflightError("paper.checkpoint", paper.checkpoint,
                             "a folder with scheduler/scheduler_config.json or scheduler_config.json "
                             "(the VP schedule of a vp_eps UNet)", "has no scheduler config")
    if layout.autoencoder is not None:
        require_checkpoint("paper.vae", str(layout.autoencoder),
                           "a diffusers VQModel / AutoencoderKL folder (the LDM's autoencoder)")
    elif unet_config.get("in_channels", 3) != 3:
        raise PreflightError("paper.vae", paper.vae, "a diffusers VQModel / AutoencoderKL folder",
                             f"is not set but the UNet has {unet_config['in_channels']} input "
                             "channels (a latent model)")
    require_checkpoint("paper.feature_model", paper.feature_model,
                       "a transformers vision encoder folder (DINOv2 for FD-DINOv2: config.json + "
                       "model.safetensors)")
    check_reference("paper.reference", paper.reference)


def check_reference(key: str, value: str) -> Path:
    """An ``.npz`` with ``mu`` and ``sigma`` (precomputed with the same feature model), or a
    folder with at least one image (searched recursively)."""
    layout = ("an .npz with arrays mu (D,) and sigma (D, D) of the same features, or a folder of "
              "reference images (any depth)")
    path = Path(value).expanduser() if value else None
    if path is None or not path.exists():
        raise PreflightError(key, value, layout, "is not set" if not value else "does not exist")
    if path.is_file():
        if path.suffix != ".npz":
            raise PreflightError(key, value, layout, "is a file but not an .npz")
        with np.load(path) as data:
            if not {"mu", "sigma"} <= set(data.files):
                raise PreflightError(key, value, layout, f"has arrays {data.files}, not mu and sigma")
        return path
    if not reference_images(path, limit=1):
        raise PreflightError(key, value, layout, "has no images")
    return path


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def reference_images(folder: Path, limit: int | None = None) -> list[Path]:
    out = []
    for path in sorted(Path(folder).rglob("*")):
        if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
            out.append(path)
            if limit is not None and len(out) >= limit:
                break
    return out


# ----------------------------------------------------------------------------- denoisers
def vp_sigmas(alphas_cumprod: torch.Tensor) -> torch.Tensor:
    """σ of every discrete VP training step in the VE view: sqrt((1 - ᾱ) / ᾱ)."""
    a = alphas_cumprod.double()
    return ((1 - a) / a).sqrt()


def sigma_to_t(sigma: float, log_sigmas: torch.Tensor) -> float:
    """Continuous training step whose σ is ``sigma`` (linear in log σ, clamped to the range)."""
    ls = math.log(max(sigma, 1e-20))
    if ls <= float(log_sigmas[0]):
        return 0.0
    if ls >= float(log_sigmas[-1]):
        return float(len(log_sigmas) - 1)
    hi = int(torch.searchsorted(log_sigmas, torch.tensor(ls, dtype=log_sigmas.dtype)))
    lo = hi - 1
    w = (ls - float(log_sigmas[lo])) / float(log_sigmas[hi] - log_sigmas[lo])
    return lo + w


class UNetDenoiser(nn.Module):
    """``D(x, σ)`` around a diffusers UNet2DModel; inputs and outputs stay in the sampler's
    dtype, the UNet runs in its own (fp32 or bf16)."""

    def __init__(self, unet: nn.Module, parameterization: str,
                 alphas_cumprod: torch.Tensor | None = None, prediction_type: str = "epsilon",
                 sigma_data: float = 0.5, time_scale: float = 1.0):
        super().__init__()
        if parameterization not in ("vp_eps", "edm"):
            raise ValueError(f"unknown parameterization {parameterization!r} (vp_eps, edm)")
        if parameterization == "vp_eps" and prediction_type not in ("epsilon", "v_prediction", "sample"):
            raise ValueError(f"unknown prediction_type {prediction_type!r}")
        self.unet, self.parameterization = unet, parameterization
        self.prediction_type, self.sigma_data, self.time_scale = prediction_type, sigma_data, time_scale
        self.log_sigmas = (vp_sigmas(alphas_cumprod).log() if alphas_cumprod is not None else None)
        config = unet.config
        self.num_classes = int(config.num_class_embeds or 0)
        self.class_labels: torch.Tensor | None = None     # set per batch by the sampler

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        c = self.unet.config
        size = c.sample_size if isinstance(c.sample_size, int) else c.sample_size[0]
        return (c.in_channels, size, size)

    def _net(self, x: torch.Tensor, t: float) -> torch.Tensor:
        dtype = next(self.unet.parameters()).dtype
        t_batch = torch.full((x.shape[0],), t, dtype=torch.float32, device=x.device)
        out = self.unet(x.to(dtype), t_batch, class_labels=self.class_labels).sample
        return out.to(x.dtype)

    def forward(self, x: torch.Tensor, sigma: float) -> torch.Tensor:
        sigma = float(sigma)
        if self.parameterization == "edm":
            s = torch.tensor(sigma, dtype=torch.float64)
            c_skip, c_out, c_in, c_noise = (float(c) for c in edm_precond(s, self.sigma_data))
            return c_skip * x + c_out * self._net(c_in * x, self.time_scale * c_noise)
        alpha = 1 / math.sqrt(1 + sigma**2)              # sqrt(ᾱ) of the VP state
        out = self._net(alpha * x, sigma_to_t(sigma, self.log_sigmas))
        if self.prediction_type == "epsilon":
            return x - sigma * out
        if self.prediction_type == "v_prediction":   # x0 = sqrt(ᾱ) x_VP - sqrt(1 - ᾱ) v
            return alpha * (alpha * x) - (sigma * alpha) * out
        return out


def load_scheduler_alphas(path: Path) -> tuple[torch.Tensor, str]:
    """ᾱ_t and the prediction type from a saved diffusers scheduler config (the scheduler class
    the folder names computes ᾱ, so every beta schedule diffusers knows is covered)."""
    import diffusers

    config = json.loads(Path(path).read_text())
    cls = getattr(diffusers, config.get("_class_name", "DDPMScheduler"), diffusers.DDPMScheduler)
    scheduler = cls.from_pretrained(str(Path(path).parent))
    return scheduler.alphas_cumprod.clone(), config.get("prediction_type", "epsilon")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def load_unet_denoiser(paper, device: torch.device, dtype: torch.dtype) -> UNetDenoiser:
    layout = resolve_layout(Path(paper.checkpoint).expanduser(), paper.vae)
    unet = load_model(layout.unet, "diffusers", device=str(device), dtype=_dtype_name(dtype))
    for p in unet.parameters():       # only the input needs gradients (divergence)
        p.requires_grad_(False)
    alphas, prediction = (load_scheduler_alphas(layout.scheduler_config)
                          if paper.parameterization == "vp_eps" else (None, "epsilon"))
    return UNetDenoiser(unet, paper.parameterization, alphas, prediction, paper.sigma_data,
                        paper.time_scale).eval()


def load_autoencoder(paper, device: torch.device, dtype: torch.dtype):
    layout = resolve_layout(Path(paper.checkpoint).expanduser(), paper.vae)
    if layout.autoencoder is None:
        return None
    vae = load_model(layout.autoencoder, "diffusers", device=str(device), dtype=_dtype_name(dtype))
    for p in vae.parameters():
        p.requires_grad_(False)
    return vae


@torch.no_grad()
def to_uint8_images(x: torch.Tensor, autoencoder=None, latent_scale: float = 1.0) -> np.ndarray:
    """A finished batch (B, C, H, W) in [-1, 1] (decoded first for a latent model) as uint8
    (B, H, W, 3), the form every FID tool scores."""
    if autoencoder is not None:
        dtype = next(autoencoder.parameters()).dtype
        x = autoencoder.decode((x / latent_scale).to(dtype)).sample.float()
    x = torch.nan_to_num(x.float(), nan=0.0).clamp(-1, 1)
    return ((x + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
