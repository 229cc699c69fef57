"""Recurrent memories of the paper's RL study, trained end to end by PPO through BPTT.

- ``S5Policy``: a stack of S5 layers (Smith et al. 2023) as Lu et al. (2023) use them for
  PPO: a complex-diagonal linear state-space model initialised from the diagonal part of the
  normal HiPPO-LegS matrix, zero-order-hold discretised with a learned step per state,
  conjugate-symmetric (``h`` real dimensions = ``h / 2`` complex states), output
  ``2 Re(C x) + D u``, then GELU and a full GLU with a residual connection. The state is
  reset to zero where an episode starts.
- ``DeepALFPolicy``: the approximate linear filter with learned parameters,
  ``w_k = (1 - delta) A(a_{k-1}) w_{k-1} + delta B y_k``, one learned ``h x h`` matrix per
  action, a learned input map and a learned ``delta``; the policy reads ``w_k`` directly.
  With ``A(a) = P(a)`` and ``B = log E`` it is exactly the fixed ALF feature.

Both train a whole rollout segment at once through ``affine_scan`` (log-depth, so the
paper's 1024-step segments stay cheap on a GPU); their ``step`` is the same recurrence one
step at a time (collection). All parameters are drawn from the run's numpy generator.
The S5 layers and the scan live in components/common/linear_recurrence.py.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from components.common.linear_recurrence import S5Block, affine_scan


class S5Policy(nn.Module):
    """Encoder (two leaky-ReLU layers, as Lu et al.), ``layers`` S5 blocks, then ``head``."""

    def __init__(self, in_dim: int, size: int, width: int, layers: int, head: nn.Module,
                 rng: np.random.Generator):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, 128), nn.LeakyReLU(), nn.Linear(128, width), nn.LeakyReLU())
        for layer in self.encoder[::2]:
            layer.orthogonal_gain = math.sqrt(2)     # Lu et al.'s encoder init (network = popjaxrl)
        self.blocks = nn.ModuleList(S5Block(width, size, rng) for _ in range(layers))
        self.head, self.size = head, size

    def initial_state(self, n: int) -> torch.Tensor:
        return torch.zeros(n, len(self.blocks), self.size // 2, dtype=torch.complex64)

    def step(self, x, h, start):
        keep, z, states = 1 - start, self.encoder(x), []
        for i, block in enumerate(self.blocks):
            hi, z = block.step(h[:, i], z, keep)
            states.append(hi)
        logits, value = self.head(z)
        return logits, value, torch.stack(states, dim=1)

    def sequence(self, xs, h0, starts):
        keeps, z = 1 - starts, self.encoder(xs)
        for i, block in enumerate(self.blocks):
            z = block.sequence(h0[:, i], z, keeps)
        return self.head(z)


def random_orthogonal(n: int, rng: np.random.Generator, cols: int | None = None) -> np.ndarray:
    """A random (n, cols) matrix with orthonormal rows or columns (whichever are fewer), as
    flax's ``orthogonal`` initialiser draws it; square when ``cols`` is not given."""
    cols = n if cols is None else cols
    q, r = np.linalg.qr(rng.normal(size=(max(n, cols), min(n, cols))))
    q = q * np.sign(np.diag(r))
    return q if n >= cols else q.T


class DeepALFPolicy(nn.Module):
    """w_k = (1 - delta) A(a_{k-1}) w_{k-1} + delta B y_k, read directly by ``head``.
    Input x = [one-hot observation, one-hot previous action] (zeros at an episode's start,
    where w restarts from 0). A(a) starts as random orthogonal matrices (unit spectral radius,
    like the permutations of the fixed filter), delta at ``delta``."""

    def __init__(self, n_obs: int, n_actions: int, size: int, delta: float, head: nn.Module,
                 rng: np.random.Generator):
        super().__init__()
        self.n_obs, self.size, self.head = n_obs, size, head
        self.A = nn.Parameter(torch.tensor(np.stack([random_orthogonal(size, rng) for _ in range(n_actions)]),
                                           dtype=torch.float32))
        self.B = nn.Parameter(torch.tensor(rng.normal(0, 1, (size, n_obs)), dtype=torch.float32))
        self.delta_logit = nn.Parameter(torch.tensor(math.log(delta / (1 - delta)), dtype=torch.float32))

    def initial_state(self, n: int) -> torch.Tensor:
        return torch.zeros(n, self.size)

    def _terms(self, x, start):
        delta = torch.sigmoid(self.delta_logit)
        obs, prev_action = x[..., :self.n_obs], x[..., self.n_obs:]
        A = torch.einsum("...a,aij->...ij", prev_action * (1 - start)[..., None], self.A)
        return (1 - delta) * A, delta * obs @ self.B.T

    def step(self, x, h, start):
        a, b = self._terms(x, start)
        h = (a @ h.unsqueeze(-1)).squeeze(-1) + b
        logits, value = self.head(h)
        return logits, value, h

    def sequence(self, xs, h0, starts):
        a, b = self._terms(xs, starts)
        return self.head(affine_scan(a, b, h0, diagonal=False))
