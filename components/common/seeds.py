"""One place that seeds every random number generator a stage may touch."""
from __future__ import annotations

import random

import numpy as np


def seed_everything(seed: int) -> np.random.Generator:
    """Seed python, numpy and torch (if imported); return a fresh numpy Generator."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pure-numpy methods do not need torch
        pass
    return np.random.default_rng(seed)
