"""verify_stein: closed-form and Monte Carlo checks of the identities SteinDiff relies on.

Every check returns a record {value, expected, tolerance, passed}; the stage fails the run if
any check is off, so no sampling result is reported on top of a broken identity.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from components.common.diffusion import SOLVERS, edm_sigmas, sample_ode
from components.common.io import write_json_atomic
from components.steindiff.data import load_mixture, load_npy
from components.steindiff.mixture import Mixture
from components.steindiff.quality import sliced_wasserstein
from components.steindiff.stein import (SteinSettings, coupling_variance, exact_divergence,
                                        hutchinson_divergence, stein_gamma, stein_step)
from components.steindiff.threads import torch_threads


def _record(value: float, expected: float, tolerance: float, relative: bool = False) -> dict:
    err = abs(value - expected) / (abs(expected) if relative else 1.0)
    return {"value": float(value), "expected": float(expected), "tolerance": tolerance,
            "relative": relative, "error": float(err), "passed": bool(err <= tolerance)}


def check_stein_lemma(n: int, seed: int) -> dict[str, dict]:
    """E[ε f(ε)] = E[f'(ε)] for ε ~ N(0, 1): f = sin gives e^{-1/2}, f = ε³ gives 3."""
    eps = np.random.default_rng(seed).standard_normal(n)
    tol = 6 / math.sqrt(n) * 4   # ~ 4 standard errors of the ε⁴ estimate (its std is √96)
    return {"stein_lemma_sin": _record(np.mean(eps * np.sin(eps)), math.exp(-0.5), tol),
            "stein_lemma_cubic": _record(np.mean(eps**4), 3.0, tol * 3)}


def check_audit_gamma(n: int, seed: int, alpha: float = 0.8, sigma: float = 0.6,
                      slope: float = 1.7) -> dict[str, dict]:
    """The audit's check: x = αx* + σε, u = 1.7x. The direct γ = E<u, x-x*>/E u² must match
    the Stein formula (which never sees x*)."""
    rng = np.random.default_rng(seed)
    x_star, eps = rng.standard_normal(n), rng.standard_normal(n)
    x = alpha * x_star + sigma * eps
    u = slope * x
    direct = np.mean(u * (x - x_star)) / np.mean(u * u)
    via_stein = stein_gamma(np.mean(u * x), np.mean(u * u), slope, sigma**2, alpha)
    # closed form with E x*² = 1: b = slope (α² + σ² - α), c = slope² (α² + σ²)
    exact = (alpha**2 + sigma**2 - alpha) / (slope * (alpha**2 + sigma**2))
    return {"audit_direct_vs_stein": _record(direct, via_stein, 0.01),
            "audit_stein_closed_form": _record(via_stein, exact, 0.01)}


def check_gaussian_euler(n: int, seed: int, sigma: float = 2.0, sigma_next: float = 1.2) -> dict:
    """Gaussian data, exact denoiser, one Euler step: γ = 1/h (marginal), 1 + r (stepwise),
    with r = σ_next/σ and h = 1 - r; through the real stein_step code path. The particles are
    drawn from the exact marginal N(μ, (s² + σ²) I) and standardised, so the batch moments are
    exact and the check is deterministic up to the divergence estimate."""
    gauss = Mixture(means=np.array([[0.5, -1.0]]), std=0.7, weights=np.array([1.0]))
    z = np.random.default_rng(seed).standard_normal((n, 2))
    z = (z - z.mean(0)) / z.std(0)
    x = torch.as_tensor(gauss.means[0] + math.sqrt(gauss.std**2 + sigma**2) * z)
    r = sigma_next / sigma
    out = {}
    for coupling, expected in (("marginal", 1 / (1 - r)), ("stepwise", 1 + r)):
        for div in ("exact", "hutchinson"):
            settings = SteinSettings(coupling=coupling, gamma_min=-1e9, gamma_max=1e9, divergence=div)
            _, _, rec = stein_step(gauss.denoiser(), x, sigma, sigma_next, "euler", settings,
                                   generator=torch.Generator().manual_seed(seed))
            out[f"gaussian_euler_{coupling}_{div}"] = _record(rec["gamma_raw"], expected, 0.01, True)
    return out


def check_hutchinson_trace(n_probes: int, seed: int, dim: int = 64) -> dict[str, dict]:
    """Hutchinson on a linear map u = A x: every sample carries one probe, so the batch mean
    is an n_probes estimate of tr A (a Wishart matrix: trace ~ dim, well conditioned)."""
    gen = torch.Generator().manual_seed(seed)
    b = torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    a = b @ b.T / dim + 0.3 * torch.randn(dim, dim, generator=gen, dtype=torch.float64)
    x = torch.randn(n_probes, dim, generator=gen, dtype=torch.float64, requires_grad=True)
    u = x @ a.T
    est = hutchinson_divergence(u, x, 1, "rademacher", gen).mean()
    return {"hutchinson_trace": _record(float(est), float(torch.trace(a)), 0.03, True)}


def _paired_heun(mixture: Mixture, n: int, seed: int, sigma: float, sigma_next: float):
    """Particles x_σ = x0 + σε with their clean x0, the Heun residual u and its exact divergence."""
    rng = np.random.default_rng(seed)
    x0 = torch.as_tensor(mixture.sample(n, rng))
    x_mid = x0 + sigma_next * torch.as_tensor(rng.standard_normal(x0.shape))
    x = x_mid + math.sqrt(sigma**2 - sigma_next**2) * torch.as_tensor(rng.standard_normal(x0.shape))
    x_in = x.clone().requires_grad_(True)
    with torch.enable_grad():
        proposal, _ = SOLVERS["heun"](mixture.denoiser(), x_in, sigma, sigma_next)
        u = x_in - proposal
        div = exact_divergence(u, x_in)
    return x0, x_mid, x, u.detach(), div.detach()


def check_mixture_identities(mixture: Mixture, n: int, seed: int,
                             sigma: float = 1.0, sigma_next: float = 0.5) -> dict[str, dict]:
    """On the 2-D mixture, through a real Heun step: (a) the Stein γ equals the direct MSE-optimal
    γ computed with the paired target, for both couplings; (b) the step with the optimal γ lowers
    the MSE by exactly b²/c (algebraic identity on the particles)."""
    x0, x_mid, x, u, div = _paired_heun(mixture, n, seed, sigma, sigma_next)
    c = float((u * u).sum(1).mean())
    out = {}
    for coupling, target in (("marginal", x0), ("stepwise", x_mid)):
        direct = float((u * (x - target)).sum(1).mean()) / c
        tau2 = coupling_variance(sigma, sigma_next, coupling)
        out[f"mixture_heun_{coupling}"] = _record(stein_gamma(0.0, c, float(div.mean()), tau2),
                                                  direct, 0.05, True)
    b = float((u * (x - x0)).sum(1).mean())
    e_k = float(((x - x0) ** 2).sum(1).mean())
    e_next = float(((x - (b / c) * u - x0) ** 2).sum(1).mean())
    out["mse_decay_identity"] = _record(e_next, e_k - b * b / c, 1e-6, True)
    return out


def check_edm_sanity(mixture: Mixture, reference: np.ndarray, n_projections: int,
                     n_sets: int = 4) -> dict:
    """Vanilla Heun with 18 EDM steps and the exact denoiser must reach the true-sample floor.
    SW2 at this sample size is dominated by mode-count noise, so both sides are averaged:
    Heun over ``n_sets`` noise seeds vs ``n_sets`` fresh true-sample sets (within 1.5x)."""
    n = len(reference)
    floor = np.mean([sliced_wasserstein(mixture.sample(n, np.random.default_rng(1000 + i)),
                                        reference, n_projections) for i in range(n_sets)])
    sw = []
    for i in range(n_sets):
        x = 80.0 * torch.randn(n, 2, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
        samples = sample_ode(mixture.denoiser(), x, edm_sigmas(18), "heun").numpy()
        sw.append(sliced_wasserstein(samples, reference, n_projections))
    rec = _record(float(np.mean(sw)), float(floor), 0.5, True)
    rec["passed"] = bool(np.mean(sw) <= 1.5 * floor)
    return {"edm_heun18_sw2_vs_floor": rec}


def run_checks(mixture: Mixture, reference: np.ndarray, v) -> dict[str, dict]:
    checks = {}
    checks.update(check_stein_lemma(v.n_mc, v.mc_seed))
    checks.update(check_audit_gamma(v.n_mc, v.mc_seed))
    checks.update(check_gaussian_euler(v.n_particles, v.mc_seed))
    checks.update(check_hutchinson_trace(v.hutchinson_probes, v.mc_seed))
    checks.update(check_mixture_identities(mixture, v.n_particles, v.mc_seed))
    checks.update(check_edm_sanity(mixture, reference, 256))
    return checks


def verify_stein_stage(cfg, ctx) -> None:
    with torch_threads(1):
        _verify_stein_stage(cfg, ctx)


def _verify_stein_stage(cfg, ctx) -> None:
    data = ctx.inputs["prepare_data"]
    checks = run_checks(load_mixture(data), load_npy(data / "mixture_reference.npy"), cfg.verify)
    write_json_atomic(ctx.out_dir / "stein_identity.json", checks)
    failed = [name for name, rec in checks.items() if not rec["passed"]]
    ctx.write_metrics({"n_checks": len(checks), "n_failed": len(failed),
                       **{f"{k}/error": rec["error"] for k, rec in checks.items()}})
    if failed:
        details = "; ".join(f"{k}: {checks[k]['value']:.5g} vs {checks[k]['expected']:.5g}"
                            for k in failed)
        raise RuntimeError(f"steindiff identity checks failed: {details}")
