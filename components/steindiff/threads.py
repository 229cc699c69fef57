"""Torch intra-op and BLAS threads for one stage.

Stage instances already run side by side (one per core); letting each also spawn a thread per
core oversubscribes the CPUs, which on a shared 2-core machine made a small MLP 15x slower.
"""
from __future__ import annotations

import contextlib

import torch
from threadpoolctl import threadpool_limits


@contextlib.contextmanager
def torch_threads(n: int = 1):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):   # numpy's BLAS too (distance matrices in evaluate)
            yield
    finally:
        torch.set_num_threads(before)
