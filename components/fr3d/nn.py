"""Small attention blocks shared by the teacher and the forecasters (pre-norm, batch-first).
Cross-attention is the shared ``components.common.transformer.CrossBlock``."""
from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Sequential):
    def __init__(self, dim: int, hidden: int, out: int | None = None):
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, out or dim))


class SelfBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = MLP(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def grid_embedding(h: int, w: int, dim: int) -> torch.Tensor:
    """(h*w, dim) sin/cos features of the normalised token position (row/h, col/w), so one
    model accepts every token grid (the zero-shot domains have other image shapes)."""
    rows, cols = torch.meshgrid((torch.arange(h) + 0.5) / h, (torch.arange(w) + 0.5) / w,
                                indexing="ij")
    n_freq = dim // 4
    freqs = math.pi * 2.0 ** torch.arange(n_freq, dtype=torch.float32) / 2 ** (n_freq / 2)
    parts = []
    for coord in (rows.reshape(-1, 1), cols.reshape(-1, 1)):
        parts += [torch.sin(coord * freqs), torch.cos(coord * freqs)]
    emb = torch.cat(parts, -1)
    return torch.nn.functional.pad(emb, (0, dim - emb.shape[-1]))
