"""Negative-video operations the perturbation controller chooses from (official tool set).

Every tool maps a float video (T, H, W, 3) on the 0..255 scale to another of the same shape;
selected tools are applied in the fixed order of ``TOOL_NAMES``.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

TOOL_NAMES = ("reverse", "sample", "shuffle", "blur", "noise", "hflip", "vflip", "grayscale")
TOOL_TEXT = {  # descriptions the router reads (official: one sentence per tool)
    "reverse": "reverse the order of the frames",
    "sample": "keep a few frames and drop the rest",
    "shuffle": "shuffle the order of the middle frames",
    "blur": "blur every frame",
    "noise": "add random noise to every frame",
    "hflip": "mirror every frame left to right",
    "vflip": "mirror every frame top to bottom",
    "grayscale": "remove the colour of every frame",
}


def reverse(v: torch.Tensor) -> torch.Tensor:
    return v.flip(0)


def sample_frames(v: torch.Tensor, keep: float = 0.4) -> torch.Tensor:
    """Keep round(keep*T) frames evenly spaced, first and last included, then hold each kept
    frame until the next (the toy backbone needs T frames; the official tool returns fewer)."""
    t = v.shape[0]
    kept = keep_indices(t, keep)
    hold = np.searchsorted(kept, np.arange(t), side="right") - 1
    return v[torch.as_tensor(kept[hold])]


def keep_indices(t: int, keep: float) -> np.ndarray:
    n = max(2, int(round(keep * t)))
    return np.unique(np.round(np.linspace(0, t - 1, n)).astype(int))


def shuffle(v: torch.Tensor, seed: int = 2025) -> torch.Tensor:
    """Permute the middle frames with a fixed seed; first and last stay in place."""
    t = v.shape[0]
    if t <= 3:
        return v
    perm = np.random.default_rng(seed).permutation(np.arange(1, t - 1))
    order = np.concatenate([[0], perm, [t - 1]])
    return v[torch.as_tensor(order)]


def blur(v: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
    radius = max(1, int(round(3 * sigma)))
    x = torch.arange(-radius, radius + 1, dtype=v.dtype)
    k = torch.exp(-x**2 / (2 * sigma**2))
    k = k / k.sum()
    frames = v.permute(0, 3, 1, 2).reshape(-1, 1, v.shape[1], v.shape[2])      # (T*3, 1, H, W)
    frames = F.conv2d(F.pad(frames, (radius, radius, 0, 0), mode="replicate"), k.view(1, 1, 1, -1))
    frames = F.conv2d(F.pad(frames, (0, 0, radius, radius), mode="replicate"), k.view(1, 1, -1, 1))
    return frames.reshape(v.shape[0], 3, v.shape[1], v.shape[2]).permute(0, 2, 3, 1)


def noise(v: torch.Tensor, std: float = 25.0, generator: torch.Generator | None = None) -> torch.Tensor:
    return (v + std * torch.randn(v.shape, generator=generator, dtype=v.dtype)).clamp(0, 255)


def hflip(v: torch.Tensor) -> torch.Tensor:
    return v.flip(2)


def vflip(v: torch.Tensor) -> torch.Tensor:
    return v.flip(1)


def grayscale(v: torch.Tensor) -> torch.Tensor:
    gray = v @ torch.tensor([0.299, 0.587, 0.114], dtype=v.dtype)
    return gray.unsqueeze(-1).expand_as(v).contiguous()


def apply_tools(v: torch.Tensor, selected, *, keep: float = 0.4, shuffle_seed: int = 2025,
                blur_sigma: float = 1.0, noise_std: float = 25.0,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Apply the selected tools (names or a 0/1 mask over TOOL_NAMES) in canonical order."""
    selected = list(selected)
    if not all(isinstance(s, str) for s in selected):          # a 0/1 mask over TOOL_NAMES
        selected = [name for name, on in zip(TOOL_NAMES, selected) if bool(on)]
    ops = {"reverse": reverse, "sample": lambda x: sample_frames(x, keep),
           "shuffle": lambda x: shuffle(x, shuffle_seed), "blur": lambda x: blur(x, blur_sigma),
           "noise": lambda x: noise(x, noise_std, generator), "hflip": hflip, "vflip": vflip,
           "grayscale": grayscale}
    unknown = set(selected) - set(TOOL_NAMES)
    if unknown:
        raise ValueError(f"unknown tools {sorted(unknown)}; known: {TOOL_NAMES}")
    for name in TOOL_NAMES:
        if name in selected:
            v = ops[name](v)
    return v
