"""LoRA: a frozen linear layer plus a trainable low-rank update, and helpers to inject it.

``LoRALinear`` computes ``base(x) + scale * x A^T B^T`` with ``A`` (r x in) and ``B`` (out x r).
``B`` starts at zero so an injected model starts equal to its base (Hu et al., 2021).
Merging code works on *effective* factors ``(scale * B, A)`` so that ``delta = B_eff @ A_eff``
with no hidden scale; ``apply_deltas`` folds dense deltas back into plain linear weights.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Iterable

import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float | None = None):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.rank = rank
        self.scale = (alpha if alpha is not None else rank) / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # same init as nn.Linear / peft

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * (x @ self.lora_A.T) @ self.lora_B.T

    def effective_factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B_eff, A)`` with the LoRA scale folded into ``B``: delta = B_eff @ A."""
        return (self.scale * self.lora_B).detach().clone(), self.lora_A.detach().clone()

    def delta(self) -> torch.Tensor:
        b, a = self.effective_factors()
        return b @ a


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def inject_lora(model: nn.Module, targets: Iterable[str] | Callable[[str], bool], rank: int,
                alpha: float | None = None) -> list[str]:
    """Wrap every ``nn.Linear`` whose name is in ``targets`` (or satisfies it, if callable) in a
    ``LoRALinear``; freezes all other parameters. Returns the wrapped names, in module order."""
    match = targets if callable(targets) else set(targets).__contains__
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and match(n)]
    if not callable(targets):
        missing = set(targets) - set(names)
        if missing:
            raise KeyError(f"no nn.Linear named {sorted(missing)} in the model")
    for p in model.parameters():
        p.requires_grad_(False)
    for name in names:
        _set_submodule(model, name, LoRALinear(model.get_submodule(name), rank, alpha))
    return names


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def lora_state(model: nn.Module) -> dict[str, dict[str, torch.Tensor]]:
    """``{layer_name: {"B": B_eff, "A": A}}``: what an adapter file stores."""
    return {n: dict(zip(("B", "A"), m.effective_factors())) for n, m in lora_modules(model).items()}


def apply_deltas(model: nn.Module, deltas: dict[str, torch.Tensor], scale: float = 1.0) -> nn.Module:
    """A copy of ``model`` where each named linear (plain or LoRA-wrapped) becomes a plain
    ``nn.Linear`` with weight ``W0 + scale * delta``: the merged model, with no adapter left."""
    merged = copy.deepcopy(model)
    for name, delta in deltas.items():
        module = merged.get_submodule(name)
        base = module.base if isinstance(module, LoRALinear) else module
        if base.weight.shape != delta.shape:
            raise ValueError(f"{name}: delta {tuple(delta.shape)} vs weight {tuple(base.weight.shape)}")
        linear = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None)
        with torch.no_grad():
            linear.weight.copy_(base.weight + scale * delta.to(base.weight.dtype))
            if base.bias is not None:
                linear.bias.copy_(base.bias)
        linear.requires_grad_(False)
        _set_submodule(merged, name, linear)
    return merged
