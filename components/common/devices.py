"""Device and dtype policy for the paper path: CUDA when present, bf16 on GPU, fp32 on CPU.

A stage asks ``resolve_device(cfg.device)`` instead of hard-coding "cuda", so the same config
runs on a laptop (tests) and on a GPU node (paper profile).
"""
from __future__ import annotations

import torch

AUTO = "auto"


def resolve_device(requested: str = AUTO) -> torch.device:
    """``auto`` picks CUDA when a GPU is visible, else CPU. An explicit ``cuda`` on a machine
    without one fails here, before any work, rather than deep inside a stage."""
    if requested == AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {requested!r} requested but no CUDA device is visible "
                           "(set device to 'auto' or 'cpu')")
    return device


def resolve_dtype(device: torch.device | str, requested: str = AUTO) -> torch.dtype:
    """``auto``: bf16 on a GPU that supports it (as the papers train), fp32 otherwise (CPU
    bf16 matmuls are slow and change test tolerances)."""
    if requested != AUTO:
        return getattr(torch, requested)
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32
