"""The paper's model families from diffusers config classes, behind the interfaces the stages
already use, and one place that builds and reloads every network of the method.

- ``DiffusersFieldVAE``: diffusers ``AutoencoderKL`` (2 field channels in; its decoder ends in a
  feature map, as the official config's ``out_channels = 64`` feeds a GINO decoder) with the
  continuous coordinate head of ``ContinuousDecoding`` in place of GINO.
- ``DiffusersLatentDenoiser``: diffusers ``UNet2DConditionModel`` cross-attending to the
  observation tokens + direction token; the mean token goes in as a projected class embedding
  (the pooled path the own UNet adds to its timestep embedding).
- ``DiffusersPixelUNet``: diffusers ``UNet2DModel`` for the pixel-space baseline.

``backbone = "own"`` (smoke, small) keeps the repository's conv models; ``"diffusers"`` (paper)
builds these. Checkpoints record their class, so later stages reload what was trained.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from components.dibilps.models import (GRID_CHANNELS, ContinuousDecoding, DirectionConditioning,
                                       FieldVAE, LatentDenoiser, UNet)

BACKBONES = ("own", "diffusers")


class DiffusersFieldVAE(ContinuousDecoding, nn.Module):
    def __init__(self, latent_channels: int, block_out_channels: list[int], layers_per_block: int,
                 norm_num_groups: int, feature_channels: int, fourier_freqs: int, res: int):
        super().__init__()
        from diffusers import AutoencoderKL

        n = len(block_out_channels)
        self.ae = AutoencoderKL(in_channels=2, out_channels=feature_channels,
                                latent_channels=latent_channels, block_out_channels=tuple(block_out_channels),
                                layers_per_block=layers_per_block, norm_num_groups=norm_num_groups,
                                down_block_types=("DownEncoderBlock2D",) * n,
                                up_block_types=("UpDecoderBlock2D",) * n, sample_size=res)
        self.res, self.fourier_freqs, self.down = res, fourier_freqs, n - 1
        self.head = self.coordinate_head(feature_channels, fourier_freqs)
        self.latent_channels = latent_channels

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dist = self.ae.encode(self._pad(x)).latent_dist
        return dist.mean, dist.logvar.clamp(-20, 10)

    def features(self, z: torch.Tensor) -> torch.Tensor:
        return self.ae.decode(z).sample


class DiffusersLatentDenoiser(DirectionConditioning, nn.Module):
    def __init__(self, latent_channels: int, block_out_channels: list[int], layers_per_block: int,
                 norm_num_groups: int, attention_head_dim: int, d_cond: int, sample_size: int,
                 grid_channels: int = 0):
        super().__init__()
        from diffusers import UNet2DConditionModel

        self.grid_channels = grid_channels

        n = len(block_out_channels)
        # SD's layout: cross-attention in every block but the lowest-resolution one
        down = ("CrossAttnDownBlock2D",) * (n - 1) + ("DownBlock2D",)
        up = ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (n - 1)
        self.unet = UNet2DConditionModel(
            sample_size=sample_size, in_channels=latent_channels + grid_channels,
            out_channels=latent_channels,
            down_block_types=down, up_block_types=up, block_out_channels=tuple(block_out_channels),
            layers_per_block=layers_per_block, norm_num_groups=norm_num_groups,
            attention_head_dim=attention_head_dim, cross_attention_dim=d_cond,
            class_embed_type="projection", projection_class_embeddings_input_dim=d_cond)
        self.direction = nn.Linear(1, d_cond)
        self.null = nn.Parameter(torch.zeros(1, 1, d_cond))

    def forward(self, z, t, cond, grid=None):
        return self.unet(self.with_grid(z, grid), t, encoder_hidden_states=cond,
                         class_labels=cond.mean(dim=1)).sample


class DiffusersPixelUNet(nn.Module):
    def __init__(self, block_out_channels: list[int], layers_per_block: int, norm_num_groups: int,
                 sample_size: int):
        super().__init__()
        from diffusers import UNet2DModel

        n = len(block_out_channels)
        self.unet = UNet2DModel(sample_size=sample_size, in_channels=2, out_channels=2,
                                block_out_channels=tuple(block_out_channels),
                                layers_per_block=layers_per_block, norm_num_groups=norm_num_groups,
                                down_block_types=("DownBlock2D",) * (n - 1) + ("AttnDownBlock2D",),
                                up_block_types=("AttnUpBlock2D",) + ("UpBlock2D",) * (n - 1))
        self.pad_multiple = 2 ** (n - 1)

    def forward(self, x, t):
        return self.unet(x, t).sample


ARCHS: dict[str, type[nn.Module]] = {c.__name__: c for c in (
    FieldVAE, LatentDenoiser, UNet, DiffusersFieldVAE, DiffusersLatentDenoiser, DiffusersPixelUNet)}


def pad_multiple(model: nn.Module) -> int:
    """Pixel fields are padded to a multiple of this (the own pixel UNet downsamples twice)."""
    return getattr(model, "pad_multiple", 4)


# ----------------------------------------------------------------------------- builders
def vae_spec(cfg, res: int, down: int | None = None) -> tuple[str, dict[str, Any]]:
    """(class name, constructor args) of the VAE for ``res``^2 fields; ``down`` overrides the
    number of downsamplings (the cost comparison at a real compression ratio)."""
    v, p = cfg.vae, cfg.paper
    if p.backbone == "diffusers":
        blocks = list(p.vae_block_out_channels)
        if down is not None:
            blocks = (blocks + [blocks[-1]] * down)[:down + 1]
        return "DiffusersFieldVAE", {"latent_channels": v.latent_channels, "block_out_channels": blocks,
                                     "layers_per_block": p.vae_layers_per_block,
                                     "norm_num_groups": p.norm_num_groups,
                                     "feature_channels": v.feature_channels,
                                     "fourier_freqs": v.fourier_freqs, "res": res}
    args = {"latent_channels": v.latent_channels, "width": v.width, "feature_channels": v.feature_channels,
            "fourier_freqs": v.fourier_freqs, "res": res}
    return "FieldVAE", args if down is None else {**args, "down": down}


def latent_spec(cfg, latent_channels: int, d_cond: int, latent_side: int) -> tuple[str, dict[str, Any]]:
    p = cfg.paper
    grid = GRID_CHANNELS if cfg.diffusion.spatial_condition else 0
    if p.backbone == "diffusers":
        return "DiffusersLatentDenoiser", {
            "latent_channels": latent_channels, "block_out_channels": list(p.unet_block_out_channels),
            "layers_per_block": p.unet_layers_per_block, "norm_num_groups": p.norm_num_groups,
            "attention_head_dim": p.attention_head_dim, "d_cond": d_cond, "sample_size": latent_side,
            "grid_channels": grid}
    return "LatentDenoiser", {"latent_channels": latent_channels, "ch": cfg.diffusion.latent_channels,
                              "d_cond": d_cond, "grid_channels": grid}


def pixel_spec(cfg, res: int, equal_width: bool = False) -> tuple[str, dict[str, Any]]:
    """The pixel baseline; ``equal_width`` gives it the latent denoiser's widths (cost C3)."""
    p = cfg.paper
    if p.backbone == "diffusers":
        blocks = p.unet_block_out_channels if equal_width else p.pixel_block_out_channels
        return "DiffusersPixelUNet", {"block_out_channels": list(blocks),
                                      "layers_per_block": p.unet_layers_per_block,
                                      "norm_num_groups": p.norm_num_groups, "sample_size": res}
    ch = cfg.diffusion.latent_channels if equal_width else cfg.diffusion.pixel_channels
    return "UNet", {"in_ch": 2, "ch": ch, "levels": 2, "d_cond": 0}


def build(spec: tuple[str, dict[str, Any]]) -> nn.Module:
    name, args = spec
    return ARCHS[name](**args)
