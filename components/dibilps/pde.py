"""PDEs on the unit square with zero Dirichlet boundary: random inputs, solvers, residuals.

Grid: ``n`` nodes per side including the boundary, ``x_i = i / (n - 1)``. Fields are arrays of
shape ``(n, n)`` indexed ``[i, j] = (x_i, y_j)``; ``u`` is zero on the boundary.

One 5-point finite-volume operator serves every PDE, so the torch residual used for guidance is
exactly the discrete equation the data solver satisfies:
``K(a) u = -div(a grad u)`` at interior nodes, face coefficients ``a_{i+1/2,j} = (a_ij + a_i+1,j) / 2``.
- poisson    ``lap u = a``             residual ``-K(1) u - a``
- helmholtz  ``lap u + k^2 u = a``     residual ``-K(1) u + k^2 u - a``
- darcy      ``-div(a grad u) = 1``    residual ``K(a) u - 1``, ``a in {3, 12}`` (thresholded GRF)
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

DARCY_LOW, DARCY_HIGH = 3.0, 12.0


# ----------------------------------------------------------------------------- random inputs
def grf_coefficients(rng: np.random.Generator, n_samples: int, modes: int, alpha: float,
                     tau: float) -> np.ndarray:
    """Karhunen-Loeve coefficients of a mean-zero Gaussian random field in the cosine basis,
    sqrt-eigenvalues ``tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2)``; the constant mode is 0."""
    k1, k2 = np.meshgrid(np.arange(modes), np.arange(modes), indexing="ij")
    sqrt_eig = tau ** (alpha - 1) * (np.pi**2 * (k1**2 + k2**2) + tau**2) ** (-alpha / 2)
    sqrt_eig[0, 0] = 0.0
    return rng.standard_normal((n_samples, modes, modes)) * sqrt_eig


def grf_on_grid(coef: np.ndarray, n: int) -> np.ndarray:
    """Evaluate the field of ``coef`` (S, K, K) on the n x n node grid; any n (super-resolution
    ground truth comes from the same continuous field, never from upsampling)."""
    x = np.linspace(0.0, 1.0, n)
    basis = np.cos(np.pi * np.outer(np.arange(coef.shape[1]), x))   # (K, n)
    return np.einsum("skl,ki,lj->sij", coef, basis, basis)


def darcy_coefficient(field: np.ndarray) -> np.ndarray:
    return np.where(field >= 0, DARCY_HIGH, DARCY_LOW)


# ----------------------------------------------------------------------------- operator
def _interior_index(n: int) -> np.ndarray:
    idx = -np.ones((n, n), dtype=np.int64)
    idx[1:-1, 1:-1] = np.arange((n - 2) ** 2).reshape(n - 2, n - 2)
    return idx


def div_operator(a: np.ndarray) -> sp.csc_matrix:
    """Sparse ``K(a)`` on interior unknowns (row-major over [1:-1, 1:-1]); boundary u = 0."""
    n = a.shape[0]
    h2 = (1.0 / (n - 1)) ** 2
    idx = _interior_index(n)
    rows, cols, vals = [], [], []
    ii, jj = np.meshgrid(np.arange(1, n - 1), np.arange(1, n - 1), indexing="ij")
    ii, jj = ii.ravel(), jj.ravel()
    p = idx[ii, jj]
    diag = np.zeros_like(p, dtype=np.float64)
    for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        face = 0.5 * (a[ii, jj] + a[ii + di, jj + dj]) / h2
        diag += face
        q = idx[ii + di, jj + dj]
        inside = q >= 0
        rows.append(p[inside]); cols.append(q[inside]); vals.append(-face[inside])
    rows.append(p); cols.append(p); vals.append(diag)
    m = (n - 2) ** 2
    return sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(m, m))


def _embed(interior: np.ndarray, n: int) -> np.ndarray:
    u = np.zeros((n, n))
    u[1:-1, 1:-1] = interior.reshape(n - 2, n - 2)
    return u


class Solver:
    """Solve a batch of one PDE on an n x n grid (factorises constant operators once)."""

    def __init__(self, pde: str, n: int, helmholtz_k: float = 1.0):
        if pde not in ("poisson", "darcy", "helmholtz"):
            raise ValueError(f"unknown pde {pde!r}")
        self.pde, self.n, self.k = pde, n, helmholtz_k
        if pde in ("poisson", "helmholtz"):
            lap = -div_operator(np.ones((n, n)))
            if pde == "helmholtz":
                lap = lap + helmholtz_k**2 * sp.identity(lap.shape[0], format="csc")
            self._lu = spla.splu(lap.tocsc())

    def solve(self, a: np.ndarray) -> np.ndarray:
        """``a`` (n, n) -> ``u`` (n, n) with zero boundary."""
        if self.pde == "darcy":
            rhs = np.ones((self.n - 2) ** 2)
            return _embed(spla.spsolve(div_operator(a), rhs), self.n)
        return _embed(self._lu.solve(a[1:-1, 1:-1].ravel().astype(np.float64)), self.n)

    def solve_batch(self, a: np.ndarray) -> np.ndarray:
        return np.stack([self.solve(x) for x in a])


# ----------------------------------------------------------------------------- residuals (torch)
def neg_div_flux(u: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``-div(a grad u)`` at interior nodes of (B, n, n) fields -> (B, n-2, n-2)."""
    n = u.shape[-1]
    h2 = (1.0 / (n - 1)) ** 2
    c = u[..., 1:-1, 1:-1]
    ac = a[..., 1:-1, 1:-1]
    out = torch.zeros_like(c)
    for sl in ((slice(2, None), slice(1, -1)), (slice(0, -2), slice(1, -1)),
               (slice(1, -1), slice(2, None)), (slice(1, -1), slice(0, -2))):
        face = 0.5 * (ac + a[..., sl[0], sl[1]])
        out = out + face * (c - u[..., sl[0], sl[1]])
    return out / h2


def residual(pde: str, u: torch.Tensor, a: torch.Tensor, helmholtz_k: float = 1.0) -> torch.Tensor:
    """Interior residual of the discrete PDE in physical units, (B, n-2, n-2). Boundary values
    of ``u`` are used as given (the data have u = 0 there)."""
    if pde == "darcy":
        return neg_div_flux(u, a) - 1.0
    lap = -neg_div_flux(u, torch.ones_like(a))
    if pde == "helmholtz":
        lap = lap + helmholtz_k**2 * u[..., 1:-1, 1:-1]
    return lap - a[..., 1:-1, 1:-1]


def residual_norm(pde: str, u: torch.Tensor, a: torch.Tensor, helmholtz_k: float = 1.0) -> torch.Tensor:
    """Per-sample ``||R||_2 / n^2`` (the official pipeline divides by 128^2), shape (B,)."""
    r = residual(pde, u, a, helmholtz_k)
    return r.flatten(1).norm(dim=1) / u.shape[-1] ** 2


# ----------------------------------------------------------------------------- normalisation
class Normaliser:
    """Maps physical (u, a) to the unit-scale channels the networks see and back.
    Darcy ``a`` -> ``(a - 7.5) / 4.5`` in {-1, 1}; other channels are divided by their train std."""

    def __init__(self, pde: str, u_scale: float, a_scale: float):
        self.pde, self.u_scale, self.a_scale = pde, float(u_scale), float(a_scale)

    @classmethod
    def fit(cls, pde: str, u: np.ndarray, a: np.ndarray) -> "Normaliser":
        a_scale = (DARCY_HIGH - DARCY_LOW) / 2 if pde == "darcy" else float(a.std())
        return cls(pde, float(u.std()), a_scale)

    def to_dict(self) -> dict:
        return {"pde": self.pde, "u_scale": self.u_scale, "a_scale": self.a_scale}

    @property
    def a_shift(self) -> float:
        return (DARCY_HIGH + DARCY_LOW) / 2 if self.pde == "darcy" else 0.0

    def encode(self, u, a):
        return u / self.u_scale, (a - self.a_shift) / self.a_scale

    def decode(self, u_n, a_n):
        return u_n * self.u_scale, a_n * self.a_scale + self.a_shift
