"""A tiny ViT for 16x16 grey images, plus the MAE decoder and the small heads SSL needs
(the paper profile's transformers ViT-MAE has the same interface: ``backbone.py``).

The encoder is the only thing that travels between stages (stock -> ingredients -> soups);
heads used by SSL objectives are thrown away after inter-training, as in the official code.
"""
from __future__ import annotations

import torch
from torch import nn

from components.selfsoup.data import as_float


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, 1, H, W) -> (B, N, patch*patch), row-major patches."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // patch) * (w // patch), patch * patch * c)


def _blocks(dim: int, depth: int, heads: int) -> nn.ModuleList:
    return nn.ModuleList(
        nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                   batch_first=True, norm_first=True)
        for _ in range(depth)
    )


class Encoder(nn.Module):
    """ViT encoder; ``forward`` returns the normalised CLS embedding."""

    def __init__(self, image_size: int = 16, patch: int = 4, dim: int = 64, depth: int = 4, heads: int = 4):
        super().__init__()
        self.patch, self.dim = patch, dim
        self.num_patches = (image_size // patch) ** 2
        self.embed = nn.Linear(patch * patch, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        # learned (not frozen) positions, so every entry of the state dict is a souped parameter
        self.pos = nn.Parameter(torch.randn(1, self.num_patches + 1, dim) * 0.02)
        self.blocks = _blocks(dim, depth, heads)
        self.norm = nn.LayerNorm(dim)

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        return images  # trained on [0, 1] pixels as they are

    def tokens(self, images: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """All output tokens (CLS first). ``keep`` (B, n_keep) selects visible patches for MAE."""
        x = self.embed(patchify(images, self.patch)) + self.pos[:, 1:]
        if keep is not None:
            x = torch.gather(x, 1, keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        cls = (self.cls + self.pos[:, :1]).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.tokens(images)[:, 0]


class MAEDecoder(nn.Module):
    """Light decoder: visible tokens + mask tokens -> pixels of every patch."""

    def __init__(self, num_patches: int, enc_dim: int = 64, dim: int = 32, depth: int = 2,
                 heads: int = 4, patch: int = 4):
        super().__init__()
        self.proj = nn.Linear(enc_dim, dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.blocks = _blocks(dim, depth, heads)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, patch * patch)

    def forward(self, tokens: torch.Tensor, keep: torch.Tensor, num_patches: int) -> torch.Tensor:
        x = self.proj(tokens)
        b, dim = x.shape[0], x.shape[-1]
        full = self.mask_token.expand(b, num_patches, dim).clone()
        full = full.scatter(1, keep.unsqueeze(-1).expand(-1, -1, dim), x[:, 1:])
        x = torch.cat([x[:, :1], full], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.out(self.norm(x))[:, 1:]


def mlp(dim_in: int, hidden: int, dim_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim_in, hidden), nn.GELU(), nn.Linear(hidden, dim_out))


class Classifier(nn.Module):
    """Encoder + linear head; its state dict is what supervised soups average."""

    def __init__(self, encoder: nn.Module, num_classes: int = 10):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.dim, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(images))


def device_of(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


def autocast(device: torch.device):
    """bf16 autocast on a GPU (as the official code trains), a no-op on CPU."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


@torch.no_grad()
def batched(model: nn.Module, images: torch.Tensor, batch: int = 512) -> torch.Tensor:
    """``model`` over ``images`` in eval mode, batch by batch on the model's device; fp32 on CPU.
    uint8 images (the paper's) become [0, 1] floats batch by batch."""
    model.eval()
    device = device_of(model)
    out = []
    for i in range(0, len(images), batch):
        with autocast(device):
            out.append(model(as_float(images[i:i + batch].to(device))).float().cpu())
    return torch.cat(out)


def embed(encoder: nn.Module, images: torch.Tensor, batch: int = 512) -> torch.Tensor:
    return batched(encoder, images, batch)


def predict_logits(model: nn.Module, images: torch.Tensor, batch: int = 512) -> torch.Tensor:
    return batched(model, images, batch)
