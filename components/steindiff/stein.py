"""SteinDiff: a scalar, reference-free rescaling of each large solver step.

A base solver proposes T(x) from the current state x at noise level σ. Write the step as a
residual u = x - T(x) and take x_next = x - γ u. The γ that minimises E||x_next - x*||² for a
target x* is b / c with b = E<u, x - x*> and c = E||u||². If x = α x* + τ ε with ε ~ N(0, I)
independent of x*, Stein's lemma turns the unknown part of b into a divergence:

    b = (1 - 1/α) E<u, x> + (τ² / α) E[div u],

so γ needs only the batch, the step and a divergence estimate (Hutchinson probes through the
whole solver step, including Heun's second denoiser call). What x* is (the clean data, τ² = σ²,
or the ideal previous state, τ² = σ² - σ_next²) is not settled by the sources, so it is a param
(``coupling``). The raw γ is unbounded when ||u|| is small, so it is clipped to
[gamma_min, gamma_max]; the last step to σ = 0 is left alone (τ is undefined there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from components.common.diffusion import SOLVERS, Denoiser, detach_state


@dataclass(frozen=True)
class SteinSettings:
    coupling: str = "stepwise"
    gamma_min: float = 0.5
    gamma_max: float = 1.5
    n_probes: int = 5
    probe: str = "rademacher"
    divergence: str = "hutchinson"

    @classmethod
    def from_section(cls, section) -> "SteinSettings":
        return cls(**section.model_dump())


def _flat_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-sample inner product over all non-batch dims."""
    return (a * b).flatten(1).sum(1)


def draw_probe(like: torch.Tensor, kind: str, generator: torch.Generator) -> torch.Tensor:
    if kind == "rademacher":
        bits = torch.randint(0, 2, like.shape, generator=generator, dtype=torch.int64)
        return (2 * bits - 1).to(like.dtype)
    if kind == "gaussian":
        return torch.randn(like.shape, generator=generator, dtype=like.dtype)
    raise ValueError(f"unknown probe {kind!r} (rademacher, gaussian)")


def hutchinson_divergence(u: torch.Tensor, x: torch.Tensor, n_probes: int, kind: str = "rademacher",
                          generator: torch.Generator | None = None) -> torch.Tensor:
    """Per-sample unbiased estimate of div u(x) = tr J: mean over probes v of vᵀ J v.
    One vector-Jacobian product per probe (valid because sample i's u depends only on x_i)."""
    generator = generator or torch.Generator().manual_seed(0)
    total = torch.zeros(x.shape[0], dtype=x.dtype)
    for _ in range(n_probes):
        v = draw_probe(u, kind, generator)
        (jtv,) = torch.autograd.grad(u, x, grad_outputs=v, retain_graph=True)
        total += _flat_dot(jtv, v)
    return total / n_probes


def exact_divergence(u: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-sample trace of the Jacobian, one backward pass per coordinate (small dims only)."""
    flat_u = u.flatten(1)
    total = torch.zeros(x.shape[0], dtype=x.dtype)
    for i in range(flat_u.shape[1]):
        (g,) = torch.autograd.grad(flat_u[:, i].sum(), x, retain_graph=True)
        total += g.flatten(1)[:, i]
    return total


def coupling_variance(sigma: float, sigma_next: float, coupling: str) -> float:
    """τ² of the assumed Gaussian coupling x = x* + τ ε (VE/EDM, α = 1)."""
    if coupling == "marginal":      # x* = clean data
        return sigma**2
    if coupling == "stepwise":      # x* = ideal state at σ_next
        return sigma**2 - sigma_next**2
    raise ValueError(f"unknown coupling {coupling!r} (marginal, stepwise)")


def stein_gamma(s_xu: float, s_uu: float, s_div: float, tau2: float, alpha: float = 1.0) -> float:
    """Reference-free MSE-optimal step scale from batch statistics."""
    return ((1 - 1 / alpha) * s_xu + (tau2 / alpha) * s_div) / s_uu


def stein_step(denoise: Denoiser, x: torch.Tensor, sigma: float, sigma_next: float, solver: str,
               settings: SteinSettings, state=None, generator: torch.Generator | None = None):
    """One corrected solver step. Returns (x_next, new_state, record of the step statistics)."""
    step = SOLVERS[solver]
    x_in = x.detach().requires_grad_(True)
    with torch.enable_grad():
        proposal, new_state = step(denoise, x_in, sigma, sigma_next, state)
        u = x_in - proposal
        if settings.divergence == "exact":
            div = exact_divergence(u, x_in)
        else:
            div = hutchinson_divergence(u, x_in, settings.n_probes, settings.probe, generator)
    u, x0 = u.detach(), x.detach()
    s_xu = float(_flat_dot(u, x0).mean())
    s_uu = float(_flat_dot(u, u).mean())
    s_div = float(div.mean())
    tau2 = coupling_variance(sigma, sigma_next, settings.coupling)
    raw = stein_gamma(s_xu, s_uu, s_div, tau2) if s_uu > 0 else 1.0
    gamma = min(max(raw, settings.gamma_min), settings.gamma_max) if math.isfinite(raw) else 1.0
    record = {"sigma": sigma, "sigma_next": sigma_next, "gamma_raw": raw, "gamma": gamma,
              "s_xu": s_xu, "s_uu": s_uu, "s_div": s_div, "tau2": tau2,
              "clipped": float(gamma != raw)}
    return x0 - gamma * u, detach_state(new_state), record


def sample_steindiff(denoise: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, solver: str,
                     settings: SteinSettings, probe_seed: int = 0):
    """Full corrected trajectory. Returns (samples, per-step records)."""
    generator = torch.Generator().manual_seed(probe_seed)  # seeded probes: reproducible runs
    sig = [float(s) for s in sigmas]
    state, records = None, []
    for k, (sigma, sigma_next) in enumerate(zip(sig[:-1], sig[1:])):
        if sigma_next == 0:      # final jump to the data: no coupling, no correction
            with torch.no_grad():
                x, state = SOLVERS[solver](denoise, x, sigma, sigma_next, state)
            records.append({"step": k, "sigma": sigma, "sigma_next": sigma_next, "gamma_raw": 1.0,
                            "gamma": 1.0, "s_xu": float("nan"), "s_uu": float("nan"),
                            "s_div": float("nan"), "tau2": float("nan"), "clipped": 0.0})
            continue
        x, state, record = stein_step(denoise, x, sigma, sigma_next, solver, settings, state,
                                      generator)
        records.append({"step": k, **record})
    return x.detach(), records
