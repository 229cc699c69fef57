"""Isotropic Gaussian mixtures with a closed-form denoiser.

If x_0 ~ Σ_k w_k N(μ_k, s² I) and x = x_0 + σ n, then x ~ Σ_k w_k N(μ_k, (s² + σ²) I) and
E[x_0 | x] = Σ_k r_k(x) (s² x + σ² μ_k) / (s² + σ²), with r_k the posterior responsibilities.
A sampler driven by this denoiser has no model error, only discretisation error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Mixture:
    means: np.ndarray      # [K, d]
    std: float
    weights: np.ndarray    # [K]

    @classmethod
    def ring(cls, n_modes: int, radius: float, std: float) -> "Mixture":
        angles = 2 * np.pi * np.arange(n_modes) / n_modes
        means = radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
        return cls(means=means, std=std, weights=np.full(n_modes, 1.0 / n_modes))

    @classmethod
    def from_dict(cls, d: dict) -> "Mixture":
        return cls(np.asarray(d["means"], float), float(d["std"]), np.asarray(d["weights"], float))

    def to_dict(self) -> dict:
        return {"means": self.means.tolist(), "std": self.std, "weights": self.weights.tolist()}

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        k = rng.choice(len(self.weights), size=n, p=self.weights)
        return self.means[k] + self.std * rng.standard_normal((n, self.means.shape[1]))

    def log_density(self, x: np.ndarray, sigma: float = 0.0) -> np.ndarray:
        var = self.std**2 + sigma**2
        d = x.shape[1]
        sq = ((x[:, None, :] - self.means[None]) ** 2).sum(-1)
        logp = np.log(self.weights)[None] - sq / (2 * var) - d / 2 * math.log(2 * math.pi * var)
        m = logp.max(1, keepdims=True)
        return (m + np.log(np.exp(logp - m).sum(1, keepdims=True)))[:, 0]

    def denoiser(self, dtype=torch.float64):
        """Differentiable exact D(x, σ) (torch), usable by the solvers and by autograd."""
        means = torch.as_tensor(self.means, dtype=dtype)
        log_w = torch.log(torch.as_tensor(self.weights, dtype=dtype))
        s2 = self.std**2

        def denoise(x: torch.Tensor, sigma: float) -> torch.Tensor:
            var = s2 + float(sigma) ** 2
            sq = ((x[:, None, :] - means[None]) ** 2).sum(-1)
            resp = torch.softmax(log_w[None] - sq / (2 * var), dim=1)           # [B, K]
            post_mean = (s2 * x[:, None, :] + float(sigma) ** 2 * means[None]) / var
            return (resp[:, :, None] * post_mean).sum(1)

        return denoise
