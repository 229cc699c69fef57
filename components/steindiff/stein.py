"""SteinDiff: a scalar, reference-free rescaling of each large solver step.

A base solver proposes T(x) from the current state x at noise level σ. Write the step as a
residual u = x - T(x) and take x_next = x - γ u. The γ that minimises E||x_next - x*||² for a
target x* is b / c with b = E<u, x - x*> and c = E||u||². If x = α x* + τ ε with ε ~ N(0, I)
independent of x*, Stein's lemma turns the unknown part of b into a divergence:

    b = (1 - 1/α) E<u, x> + (τ² / α) E[div u],

so γ needs only the batch, the step and a divergence estimate (Hutchinson probes through the
whole solver step, including Heun's second denoiser call). What x* is (the clean data, τ² = σ²,
or the ideal previous state, τ² = σ² - σ_next²) is not settled by the sources, so it is a param
(``coupling``). The paper's formula uses the marginal variance σ_k² and clips γ from below
only (``gamma_max = None``); the stepwise coupling with a two-sided clip is an ablation. The
last step to σ = 0 is left alone (τ is undefined there).

The oracle arm asks what the best possible scalar rescaling would do: at every step it takes
the γ that brings the batch closest to the exact flow map of the very same particles (a
fine-grid solve of the probability-flow ODE from σ to σ_next). A Stein step whose γ is far
from the oracle's is not doing what the formula is meant to do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from components.common.diffusion import Denoiser
from components.steindiff.solvers import SOLVERS, detach_state, start_state


@dataclass(frozen=True)
class SteinSettings:
    coupling: str = "marginal"
    gamma_min: float = 0.5
    gamma_max: float | None = None      # None: lower clip only, as the paper writes it
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
    """A probe drawn on the CPU generator (the same numbers on any device), moved to ``like``'s."""
    if kind == "rademacher":
        bits = torch.randint(0, 2, like.shape, generator=generator, dtype=torch.int64)
        return (2 * bits - 1).to(device=like.device, dtype=like.dtype)
    if kind == "gaussian":
        return torch.randn(like.shape, generator=generator, dtype=like.dtype).to(like.device)
    raise ValueError(f"unknown probe {kind!r} (rademacher, gaussian)")


def hutchinson_divergence(u: torch.Tensor, x: torch.Tensor, n_probes: int, kind: str = "rademacher",
                          generator: torch.Generator | None = None) -> torch.Tensor:
    """Per-sample unbiased estimate of div u(x) = tr J: mean over probes v of vᵀ J v.
    One vector-Jacobian product per probe (valid because sample i's u depends only on x_i)."""
    generator = generator or torch.Generator().manual_seed(0)
    total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for _ in range(n_probes):
        v = draw_probe(u, kind, generator)
        (jtv,) = torch.autograd.grad(u, x, grad_outputs=v, retain_graph=True)
        total += _flat_dot(jtv, v)
    return total / n_probes


def exact_divergence(u: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-sample trace of the Jacobian, one backward pass per coordinate (small dims only)."""
    flat_u = u.flatten(1)
    total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
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


def clip_gamma(raw: float, gamma_min: float, gamma_max: float | None) -> float:
    """Clip the raw coefficient; a non-finite one falls back to the vanilla step."""
    if not math.isfinite(raw):
        return 1.0
    gamma = max(raw, gamma_min)
    return gamma if gamma_max is None else min(gamma, gamma_max)


def fine_flow(denoise: Denoiser, x: torch.Tensor, sigma: float, sigma_next: float,
              substeps: int) -> torch.Tensor:
    """The exact flow map from σ to σ_next (> 0), approximated by ``substeps`` Heun steps on a
    log-uniform grid."""
    grid = torch.logspace(math.log10(sigma), math.log10(sigma_next), substeps + 1,
                          dtype=torch.float64)
    with torch.no_grad():
        return sample_ode_segment(denoise, x, [float(g) for g in grid])


def sample_ode_segment(denoise: Denoiser, x: torch.Tensor, sigmas: list[float]) -> torch.Tensor:
    for sigma, sigma_next in zip(sigmas[:-1], sigmas[1:]):
        x, _ = SOLVERS["heun"](denoise, x, sigma, sigma_next)
    return x


def oracle_gamma(u: torch.Tensor, x: torch.Tensor, target: torch.Tensor) -> float:
    """The batch scalar γ minimising mean ||x - γ u - target||²."""
    return float(_flat_dot(u, x - target).mean() / _flat_dot(u, u).mean())


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
    gamma = clip_gamma(raw, settings.gamma_min, settings.gamma_max)
    record = {"sigma": sigma, "sigma_next": sigma_next, "gamma_raw": raw, "gamma": gamma,
              "s_xu": s_xu, "s_uu": s_uu, "s_div": s_div, "tau2": tau2,
              "clipped": float(gamma != raw)}
    return x0 - gamma * u, detach_state(new_state), record


NAN = float("nan")
_UNCORRECTED = {"gamma_raw": 1.0, "gamma": 1.0, "s_xu": NAN, "s_uu": NAN, "s_div": NAN,
                "tau2": NAN, "clipped": 0.0, "gamma_oracle": NAN}


def _trajectory(denoise: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, solver: str,
                corrected_step):
    """Run the solver with ``corrected_step(x, σ, σ_next, state) -> (x, state, record)`` on
    every step but the final jump to the data, which no arm corrects (no coupling there)."""
    sig = [float(s) for s in sigmas]
    state, records = start_state(solver, sig), []
    for k, (sigma, sigma_next) in enumerate(zip(sig[:-1], sig[1:])):
        if sigma_next == 0:
            with torch.no_grad():
                x, state = SOLVERS[solver](denoise, x, sigma, 0.0, state)
            record = {"sigma": sigma, "sigma_next": 0.0, **_UNCORRECTED}
        else:
            x, state, record = corrected_step(x, sigma, sigma_next, state)
        records.append({"step": k, **record})
    return x.detach(), records


def sample_steindiff(denoise: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, solver: str,
                     settings: SteinSettings, probe_seed: int = 0, oracle_substeps: int = 0):
    """Full corrected trajectory. Returns (samples, per-step records). With
    ``oracle_substeps > 0`` every record also carries the oracle γ of the same particles."""
    generator = torch.Generator().manual_seed(probe_seed)  # seeded probes: reproducible runs

    def step(x, sigma, sigma_next, state):
        x_next, new_state, record = stein_step(denoise, x, sigma, sigma_next, solver, settings,
                                               state, generator)
        record["gamma_oracle"] = (_oracle_at(denoise, x.detach(), sigma, sigma_next, solver,
                                             state, oracle_substeps)
                                  if oracle_substeps else NAN)
        return x_next, new_state, record

    return _trajectory(denoise, x, sigmas, solver, step)


def _oracle_at(denoise, x, sigma, sigma_next, solver, state, substeps) -> float:
    """Oracle γ of the solver step from these particles (logged beside the Stein γ)."""
    with torch.no_grad():
        proposal, _ = SOLVERS[solver](denoise, x, sigma, sigma_next, state)
        return oracle_gamma(x - proposal, x, fine_flow(denoise, x, sigma, sigma_next, substeps))


def sample_oracle(denoise: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, solver: str,
                  substeps: int):
    """Every step rescaled by the oracle γ (distance to the exact flow map of the same
    particles); the last step to σ = 0 is left alone, as in the Stein arms."""

    @torch.no_grad()
    def step(x, sigma, sigma_next, state):
        proposal, new_state = SOLVERS[solver](denoise, x, sigma, sigma_next, state)
        u = x - proposal
        gamma = oracle_gamma(u, x, fine_flow(denoise, x, sigma, sigma_next, substeps))
        return x - gamma * u, new_state, {"sigma": sigma, "sigma_next": sigma_next,
                                          **_UNCORRECTED, "gamma_raw": gamma, "gamma": gamma,
                                          "gamma_oracle": gamma}

    return _trajectory(denoise, x, sigmas, solver, step)
