"""Diagonal linear recurrences trained through a parallel scan: S5 (Smith et al. 2023).

- ``affine_scan``: all states of h_t = a_t h_{t-1} + b_t in log2(T) doubling rounds (the
  parallel form a GPU trains long segments with), diagonal or full-matrix ``a``.
- ``S5SSM`` / ``S5Block``: a complex-diagonal state-space layer initialised from the diagonal
  part of the normal HiPPO-LegS matrix, zero-order-hold discretised with a learned step per
  state, conjugate-symmetric (``size`` real dimensions = ``size / 2`` complex states), output
  ``2 Re(C x) + D u``; the block adds GELU, a full GLU and a residual connection. States reset
  to zero where ``keep`` is 0 (an episode start). ``step`` is the same recurrence one step at a
  time. Parameters are drawn from a numpy generator, with JAX's truncated lecun-normal.

No maintained S5 package is installed here (``s5-pytorch`` is not), so it is written once.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

DT_MIN, DT_MAX = 1e-3, 1e-1          # S5's range for the initial discretisation steps
TRUNCATED_STD = 0.87962566103423978  # standard deviation of a standard normal truncated to [-2, 2]


def affine_scan(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor, diagonal: bool = True) -> torch.Tensor:
    """All states of h_t = a_t h_{t-1} + b_t (t = 0..T-1) from h_{-1} = h0, by doubling
    (Hillis-Steele): log2(T) rounds, each composing every element with the one ``offset``
    steps earlier. ``diagonal``: a_t multiplies elementwise (b_t's shape); otherwise a_t is a
    matrix over b_t's last axis."""
    apply = (lambda m, x: m * x) if diagonal else (lambda m, x: (m @ x.unsqueeze(-1)).squeeze(-1))
    compose = (lambda m, n: m * n) if diagonal else (lambda m, n: m @ n)
    b = torch.cat([(apply(a[0], h0) + b[0]).unsqueeze(0), b[1:]])
    offset = 1
    while offset < a.shape[0]:
        b = torch.cat([b[:offset], apply(a[offset:], b[:-offset]) + b[offset:]])
        a = torch.cat([a[:offset], compose(a[offset:], a[:-offset])])
        offset *= 2
    return b


def hippo_diagonal(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues and eigenvectors of the normal part of HiPPO-LegS (size n): -1/2 plus a
    skew-symmetric matrix, so every eigenvalue is -1/2 + i omega and V is unitary."""
    q = np.sqrt(np.arange(n) + 0.5)
    skew = np.tril(np.outer(q, q), -1)
    skew = skew.T - skew                 # entry (i, j) = sign(j - i) q_i q_j
    omega, V = np.linalg.eigh(-1j * skew)
    return -0.5 + 1j * omega, V


def truncated_normal(rng: np.random.Generator, shape, std: float) -> np.ndarray:
    """JAX's lecun-normal draw: a standard normal truncated to [-2, 2] (values outside are
    redrawn), rescaled so that the result has standard deviation ``std``."""
    z = rng.standard_normal(shape)
    outside = np.abs(z) > 2
    while outside.any():
        z[outside] = rng.standard_normal(int(outside.sum()))
        outside = np.abs(z) > 2
    return z * std / TRUNCATED_STD


def _complex_param(values: np.ndarray) -> tuple[nn.Parameter, nn.Parameter]:
    return (nn.Parameter(torch.tensor(values.real, dtype=torch.float32)),
            nn.Parameter(torch.tensor(values.imag, dtype=torch.float32)))


class S5SSM(nn.Module):
    """One S5 state-space model over ``width`` channels with ``size`` real state dimensions."""

    def __init__(self, width: int, size: int, rng: np.random.Generator):
        super().__init__()
        if size % 2:
            raise ValueError(f"S5 state size must be even (conjugate pairs), got {size}")
        eigs, V = hippo_diagonal(size)
        half = size // 2
        V = V[:, :half]                                       # one of each conjugate pair
        self.lambda_re, self.lambda_im = _complex_param(eigs[:half])
        B = truncated_normal(rng, (size, width), 1 / math.sqrt(size))        # JAX's lecun_normal
        self.b_re, self.b_im = _complex_param(V.conj().T @ B)
        C = truncated_normal(rng, (width, size, 2), 1 / math.sqrt(size * width))
        self.c_re, self.c_im = _complex_param((C[..., 0] + 1j * C[..., 1]) @ V)
        self.D = nn.Parameter(torch.tensor(rng.normal(0, 1, width), dtype=torch.float32))
        self.log_step = nn.Parameter(torch.tensor(
            rng.uniform(math.log(DT_MIN), math.log(DT_MAX), half), dtype=torch.float32))
        self.half = half

    def discretised(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero-order hold: lambda_bar = exp(lambda dt), B_bar = (lambda_bar - 1) / lambda B."""
        lam = torch.complex(self.lambda_re, self.lambda_im)
        lam_bar = torch.exp(lam * torch.exp(self.log_step))
        B_bar = ((lam_bar - 1) / lam)[:, None] * torch.complex(self.b_re, self.b_im)
        return lam_bar, B_bar

    def output(self, states: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        C = torch.complex(self.c_re, self.c_im)
        return 2 * (states @ C.T).real + self.D * u

    def step(self, h, u, keep):
        lam_bar, B_bar = self.discretised()
        h = lam_bar * h * keep[:, None] + u.to(B_bar.dtype) @ B_bar.T
        return h, self.output(h, u)

    def sequence(self, h0, us, keeps):
        lam_bar, B_bar = self.discretised()
        states = affine_scan(lam_bar * keeps[..., None].to(lam_bar.dtype), us.to(B_bar.dtype) @ B_bar.T, h0)
        return self.output(states, us)


class S5Block(nn.Module):
    """SSM, GELU, full GLU, residual (Lu et al.'s PPO setting: no layer norm)."""

    def __init__(self, width: int, size: int, rng: np.random.Generator):
        super().__init__()
        self.ssm = S5SSM(width, size, rng)
        self.out, self.gate = nn.Linear(width, width), nn.Linear(width, width)

    def glu(self, x, y):
        y = nn.functional.gelu(y)
        return x + self.out(y) * torch.sigmoid(self.gate(y))

    def step(self, h, x, keep):
        h, y = self.ssm.step(h, x, keep)
        return h, self.glu(x, y)

    def sequence(self, h0, xs, keeps):
        return self.glu(xs, self.ssm.sequence(h0, xs, keeps))
