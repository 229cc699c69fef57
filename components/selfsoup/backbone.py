"""Which ViT the stages cook with: the tiny in-repo ViT (small profile) or a transformers
ViT-MAE loaded from a local ``save_pretrained`` folder (paper profile: MAE ViT-B/16).

Both expose the same interface to the stage code (``tokens(images, keep)``, ``forward`` -> CLS,
``normalize``, ``patch``, ``num_patches``, ``dim``; a decoder called as
``decoder(tokens, keep, num_patches)``), so stock -> ingredients -> soups run one code path.

The architecture travels with the stock's weights: ``pretrain_stock`` writes ``arch.json`` when
the stock came from a checkpoint, and every later stage builds its encoder from that file.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from components.common.io import read_json, write_json_atomic

ARCH_FILE = "arch.json"
# the MAE release normalises inputs with ImageNet statistics (its image processor's defaults)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class ViTMAEEncoder(nn.Module):
    """A transformers ``ViTMAEModel`` with the tiny encoder's interface. Masking takes the
    visible-patch indices from the caller (as the official code does) instead of the model's
    own random masking, so MAE ingredients and the tiny path share one masking rule."""

    def __init__(self, vit, mean=IMAGENET_MEAN, std=IMAGENET_STD):
        super().__init__()
        self.vit = vit
        config = vit.config
        self.patch = config.patch_size
        self.num_patches = vit.embeddings.patch_embeddings.num_patches
        self.dim = config.hidden_size
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """[0, 1] pixels -> the statistics the checkpoint was pre-trained with."""
        return (images - self.mean) / self.std

    def tokens(self, images: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        emb = self.vit.embeddings
        x = emb.patch_embeddings(self.normalize(images)) + emb.position_embeddings[:, 1:]
        if keep is not None:
            x = torch.gather(x, 1, keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        cls = (emb.cls_token + emb.position_embeddings[:, :1]).expand(x.shape[0], -1, -1)
        hidden = torch.cat([cls, x], dim=1)
        for layer in self.vit.layers:
            hidden = layer(hidden)
        return self.vit.layernorm(hidden)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.tokens(images)[:, 0]


class ViTMAEDecoderAdapter(nn.Module):
    """transformers' ``ViTMAEDecoder`` called with visible-patch indices instead of ``ids_restore``."""

    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, tokens: torch.Tensor, keep: torch.Tensor, num_patches: int) -> torch.Tensor:
        return self.decoder(tokens, restore_order(keep, num_patches)).logits


def restore_order(keep: torch.Tensor, num_patches: int) -> torch.Tensor:
    """``ids_restore`` for a sequence laid out as [visible patches in ``keep`` order, masked
    patches in ascending order]: position of patch j in that sequence."""
    b, n_keep = keep.shape
    rank = torch.full((b, num_patches), float(num_patches), device=keep.device)
    rank.scatter_(1, keep, torch.arange(n_keep, dtype=rank.dtype, device=keep.device).expand(b, -1))
    shuffle = torch.argsort(rank, dim=1, stable=True)
    return torch.argsort(shuffle, dim=1)


def image_stats(folder: str | Path, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean/std from the checkpoint's ``preprocessor_config.json`` when it has them for its
    channels; else ImageNet's for RGB, and none (0, 1) for other channel counts."""
    path = Path(folder) / "preprocessor_config.json"
    if path.is_file():
        cfg = read_json(path)
        mean, std = cfg.get("image_mean"), cfg.get("image_std")
        if isinstance(mean, list) and isinstance(std, list) and len(mean) == len(std) == channels:
            return tuple(mean), tuple(std)
    if channels == 3:
        return IMAGENET_MEAN, IMAGENET_STD
    return (0.0,) * channels, (1.0,) * channels


def load_checkpoint(folder: str | Path) -> tuple[ViTMAEEncoder, ViTMAEDecoderAdapter, dict]:
    """Encoder + decoder of a ``ViTMAEForPreTraining`` folder (fp32 on CPU; stages move them),
    and the ``arch`` record that rebuilds the same architecture later."""
    from components.common.hf_models import load_model

    model = load_model(folder, "pretraining", device="cpu", dtype="float32")
    mean, std = image_stats(folder, model.config.num_channels)
    arch = {"family": "vit_mae", "config": model.config.to_dict(), "mean": list(mean), "std": list(std),
            "checkpoint": str(folder)}
    return (ViTMAEEncoder(model.vit, mean, std), ViTMAEDecoderAdapter(model.decoder), arch)


def build_hf_encoder(arch: dict) -> ViTMAEEncoder:
    """A ViT-MAE encoder of the recorded architecture (weights are loaded by the caller)."""
    from transformers import ViTMAEConfig, ViTMAEModel

    return ViTMAEEncoder(ViTMAEModel(ViTMAEConfig.from_dict(arch["config"])), arch["mean"], arch["std"])


def build_hf_decoder(arch: dict, num_patches: int) -> ViTMAEDecoderAdapter:
    from transformers import ViTMAEConfig
    from transformers.models.vit_mae.modeling_vit_mae import ViTMAEDecoder

    return ViTMAEDecoderAdapter(ViTMAEDecoder(ViTMAEConfig.from_dict(arch["config"]), num_patches))


def save_arch(folder: Path, arch: dict | None) -> None:
    if arch is not None:
        write_json_atomic(Path(folder) / ARCH_FILE, arch)


def read_arch(stock_dir: Path) -> dict | None:
    """The stock's architecture record, or None for the tiny in-repo ViT (``model.*`` params)."""
    path = Path(stock_dir) / ARCH_FILE
    return read_json(path) if path.is_file() else None
