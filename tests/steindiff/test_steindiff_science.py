"""Science of steindiff: EDM formulas, solvers, Stein identities, Hutchinson, γ closed forms."""
import math

import numpy as np
import pytest
import torch

from components.common.diffusion import (EDMDenoiser, MLPNet, edm_loss, edm_precond, edm_sigmas,
                                         forward_noise, heun_step, logsnr_sigmas, nfe, sample_ode)
from components.steindiff.mixture import Mixture
from components.steindiff.quality import frechet_distance, mode_stats, sliced_wasserstein
from components.steindiff.stein import (SteinSettings, coupling_variance, exact_divergence,
                                        hutchinson_divergence, sample_steindiff, stein_gamma,
                                        stein_step)
from components.steindiff.verify import (check_audit_gamma, check_gaussian_euler,
                                         check_hutchinson_trace, check_mixture_identities,
                                         check_stein_lemma)

GAUSS = Mixture(means=np.array([[0.5, -1.0]]), std=0.7, weights=np.array([1.0]))


# ----------------------------------------------------------------------------- EDM formulas
def test_edm_sigmas_match_formula():
    sig = edm_sigmas(5, 0.002, 80.0, 7.0)
    assert sig.shape == (6,) and sig[-1] == 0
    assert sig[0] == pytest.approx(80.0) and sig[-2] == pytest.approx(0.002)
    i = 2
    expected = (80 ** (1 / 7) + i / 4 * (0.002 ** (1 / 7) - 80 ** (1 / 7))) ** 7
    assert float(sig[i]) == pytest.approx(expected, rel=1e-12)
    assert torch.all(sig[:-1][1:] < sig[:-1][:-1])
    log_sig = torch.log(logsnr_sigmas(4, 0.002, 80.0)[:-1])
    assert torch.allclose(log_sig.diff(), log_sig.diff()[0].expand(3))


def test_edm_preconditioning_formulas():
    sigma, sd = torch.tensor([0.1, 1.0, 10.0]), 0.5
    c_skip, c_out, c_in, c_noise = edm_precond(sigma, sd)
    torch.testing.assert_close(c_skip, sd**2 / (sigma**2 + sd**2))
    torch.testing.assert_close(c_out, sigma * sd / torch.sqrt(sigma**2 + sd**2))
    torch.testing.assert_close(c_in, 1 / torch.sqrt(sigma**2 + sd**2))
    torch.testing.assert_close(c_noise, torch.log(sigma) / 4)
    # the effective training target of F has unit variance for data of std σ_d:
    # Var[(x0 - c_skip x)/c_out] = 1 when Var x0 = σ_d²
    var = ((1 - c_skip) ** 2 * sd**2 + c_skip**2 * sigma**2) / c_out**2
    torch.testing.assert_close(var, torch.ones(3))


def test_edm_denoiser_wraps_net_and_loss_is_finite():
    torch.manual_seed(0)
    model = EDMDenoiser(MLPNet(4, width=16, depth=2, emb_dim=8), sigma_data=0.5)
    x = torch.randn(8, 4)
    out = model(x, 0.3)
    c_skip, c_out, c_in, c_noise = edm_precond(torch.full((8,), 0.3), 0.5)
    manual = c_skip[:, None] * x + c_out[:, None] * model.net(c_in[:, None] * x, c_noise)
    torch.testing.assert_close(out, manual)
    assert torch.isfinite(edm_loss(model, x))
    # at tiny σ the preconditioned denoiser is ~ the identity regardless of F
    torch.testing.assert_close(model(x, 1e-4), x, atol=1e-3, rtol=0)


def test_forward_noise_per_sample_sigma():
    x0, n = torch.zeros(3, 2), torch.ones(3, 2)
    out = forward_noise(x0, torch.tensor([1.0, 2.0, 3.0]), n)
    torch.testing.assert_close(out[:, 0], torch.tensor([1.0, 2.0, 3.0]))


def test_nfe_accounting():
    assert nfe("heun", 18) == 35 and nfe("euler", 5) == 5 and nfe("dpmpp2m", 5) == 5


# ----------------------------------------------------------------------------- exact denoiser / solvers
def test_gaussian_denoiser_closed_form():
    s2, sigma = 0.49, 1.3
    x = torch.randn(5, 2, dtype=torch.float64)
    mu = torch.tensor([0.5, -1.0], dtype=torch.float64)
    expected = (s2 * x + sigma**2 * mu) / (s2 + sigma**2)
    torch.testing.assert_close(GAUSS.denoiser()(x, sigma), expected)


@pytest.mark.parametrize("solver", ["euler", "heun", "dpmpp2m"])
def test_solvers_converge_on_gaussian(solver):
    """Many steps with the exact denoiser: output ~ N(μ, s²) (the PF-ODE is exact here)."""
    x = 80.0 * torch.randn(4000, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = sample_ode(GAUSS.denoiser(), x, edm_sigmas(60), solver)
    assert out.mean(0).numpy() == pytest.approx([0.5, -1.0], abs=0.05)
    assert out.std(0).numpy() == pytest.approx([0.7, 0.7], rel=0.05)


def test_heun_is_euler_on_last_step():
    x = torch.randn(4, 2, dtype=torch.float64)
    out, _ = heun_step(GAUSS.denoiser(), x, 0.5, 0.0)
    torch.testing.assert_close(out, GAUSS.denoiser()(x, 0.5))


# ----------------------------------------------------------------------------- Stein identities
def test_stein_lemma_and_audit_check():
    for rec in {**check_stein_lemma(100_000, 1), **check_audit_gamma(200_000, 20260802)}.values():
        assert rec["passed"], rec


def test_stein_gamma_formula_reduces_for_ve():
    assert stein_gamma(3.0, 2.0, 0.5, tau2=4.0, alpha=1.0) == pytest.approx(4.0 * 0.5 / 2.0)
    assert stein_gamma(1.0, 2.0, 0.5, tau2=0.36, alpha=0.8) == pytest.approx(
        ((1 - 1 / 0.8) * 1.0 + 0.36 / 0.8 * 0.5) / 2.0)
    assert coupling_variance(2.0, 1.2, "marginal") == pytest.approx(4.0)
    assert coupling_variance(2.0, 1.2, "stepwise") == pytest.approx(4.0 - 1.44)
    with pytest.raises(ValueError):
        coupling_variance(2.0, 1.2, "bogus")


@pytest.mark.parametrize("sigma,sigma_next", [(2.0, 1.2), (10.0, 3.0)])
def test_euler_gamma_closed_forms_on_gaussian(sigma, sigma_next):
    """γ = 1/h (marginal) and 1 + r (stepwise) for Gaussian data and exact denoiser."""
    for rec in check_gaussian_euler(2000, 3, sigma, sigma_next).values():
        assert rec["passed"], rec


def test_hutchinson_matches_exact_divergence():
    assert check_hutchinson_trace(4000, 0)["hutchinson_trace"]["passed"]
    # through a nonlinear Heun step on the mixture: many probes ~ exact trace, per batch mean
    mix = Mixture.ring(8, 2.0, 0.15)
    x = (torch.randn(2000, 2, dtype=torch.float64) * 1.5).requires_grad_(True)
    proposal, _ = heun_step(mix.denoiser(), x, 1.0, 0.6)
    u = x - proposal
    exact = exact_divergence(u, x)
    approx = hutchinson_divergence(u, x, 20, "gaussian", torch.Generator().manual_seed(1))
    assert float(approx.mean()) == pytest.approx(float(exact.mean()), rel=0.03)
    # Rademacher is exact for a diagonal Jacobian (per-coordinate maps)
    x2 = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    u2 = torch.sin(x2)
    torch.testing.assert_close(hutchinson_divergence(u2, x2, 1), torch.cos(x2).sum(1).detach())


def test_stein_gamma_matches_direct_gamma_and_mse_decay_on_mixture():
    for rec in check_mixture_identities(Mixture.ring(8, 2.0, 0.15), 20_000, 5).values():
        assert rec["passed"], rec


def test_gamma_one_reproduces_vanilla_solver():
    """Clip bounds [1, 1] force γ = 1: the corrected sampler must equal the vanilla one."""
    mix = Mixture.ring(8, 2.0, 0.15)
    x = 80.0 * torch.randn(300, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for solver in ("euler", "heun", "dpmpp2m"):
        sig = edm_sigmas(5)
        vanilla = sample_ode(mix.denoiser(), x, sig, solver)
        stein, records = sample_steindiff(mix.denoiser(), x, sig, solver,
                                          SteinSettings(gamma_min=1.0, gamma_max=1.0))
        torch.testing.assert_close(stein, vanilla, rtol=1e-12, atol=1e-12)
        assert all(r["gamma"] == 1.0 for r in records)


def test_stein_step_clips_and_records():
    x = torch.randn(200, 2, dtype=torch.float64) * 2.0
    settings = SteinSettings(coupling="marginal", gamma_min=0.5, gamma_max=1.5, divergence="exact")
    x_next, _, rec = stein_step(GAUSS.denoiser(), x, 2.0, 1.2, "euler", settings)
    assert rec["gamma_raw"] > 1.5 and rec["gamma"] == 1.5 and rec["clipped"] == 1.0
    vanilla = sample_ode(GAUSS.denoiser(), x, torch.tensor([2.0, 1.2]), "euler")
    torch.testing.assert_close(x_next, x - 1.5 * (x - vanilla))


# ----------------------------------------------------------------------------- metrics
def test_quality_metrics_basic_properties():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2000, 2)), rng.standard_normal((2000, 2))
    assert sliced_wasserstein(a, a) == pytest.approx(0.0)
    # a shift by δ along every axis: SW2 = |δ|·sqrt(E[(θ·1)²]) = δ for a 2-D unit direction
    shifted = sliced_wasserstein(a, a + np.array([1.0, 0.0]), n_projections=4000)
    assert shifted == pytest.approx(math.sqrt(0.5), rel=0.05)
    assert sliced_wasserstein(a, b) < 0.1
    assert frechet_distance(a, b) < 0.02
    assert frechet_distance(a, a + 1.0) == pytest.approx(2.0, rel=0.02)
    # unequal sizes go through interpolated quantiles; must agree with numpy's
    from components.steindiff.quality import _quantiles
    cols = np.sort(rng.standard_normal((37, 5)), axis=0)
    q = (np.arange(50) + 0.5) / 50
    np.testing.assert_allclose(_quantiles(cols, q), np.quantile(cols, q, axis=0))
    assert sliced_wasserstein(a[:1500], b) < 0.1
    mix = Mixture.ring(8, 2.0, 0.15)
    stats = mode_stats(mix.sample(4000, rng), mix)
    assert stats["modes_covered"] == 8 and stats["high_quality"] > 0.95
    assert mode_stats(np.zeros((100, 2)), mix)["modes_covered"] == 0


# ----------------------------------------------------------------------------- primary arm, oracle
def test_primary_arm_is_the_formula_as_written():
    """Bug fixed: the default arm used the stepwise coupling (σ² - σ_next²) and a two-sided
    clip; the paper's formula uses σ_k² and clips from below only."""
    from components.steindiff.config import SteindiffConfig

    cfg = SteindiffConfig()
    assert cfg.sample.stein.coupling == "marginal" and cfg.sample.stein.gamma_max is None
    assert cfg.sample.stein_ablation.coupling == "stepwise"
    assert (cfg.sample.stein_ablation.gamma_min, cfg.sample.stein_ablation.gamma_max) == (0.5, 1.5)
    settings = SteinSettings.from_section(cfg.sample.stein)
    assert coupling_variance(2.0, 1.2, settings.coupling) == pytest.approx(4.0)
    x = torch.randn(2000, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2.2
    _, _, rec = stein_step(GAUSS.denoiser(), x, 2.0, 1.2, "euler", settings)
    assert rec["gamma_raw"] > 1.5 and rec["gamma"] == rec["gamma_raw"] and rec["clipped"] == 0.0


def _gauss_flow(x, sigma, sigma_next):
    """Exact PF-ODE map for N(μ, s² I) data: x - μ scales by sqrt((s² + σ'²) / (s² + σ²))."""
    mu = torch.as_tensor(GAUSS.means[0])
    scale = math.sqrt((GAUSS.std**2 + sigma_next**2) / (GAUSS.std**2 + sigma**2))
    return mu + scale * (x - mu)


def test_fine_flow_matches_gaussian_closed_form():
    from components.steindiff.stein import fine_flow

    x = torch.randn(500, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 5
    torch.testing.assert_close(fine_flow(GAUSS.denoiser(), x, 5.0, 0.3, 64),
                               _gauss_flow(x, 5.0, 0.3), rtol=1e-3, atol=2e-3)


def test_oracle_step_lands_on_the_flow_map_for_isotropic_gaussian():
    """For isotropic Gaussian data the Euler residual is parallel to x - Φ(x), so the oracle
    scalar recovers the exact flow map; its γ is then far from the marginal Stein γ (1/h)."""
    from components.steindiff.stein import sample_oracle

    x = torch.randn(1000, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 3
    sig = torch.tensor([3.0, 1.0, 0.0], dtype=torch.float64)
    out, records = sample_oracle(GAUSS.denoiser(), x, sig, "euler", 64)
    expected = _gauss_flow(x, 3.0, 1.0)
    x1 = x - records[0]["gamma"] * (x - (x + (1.0 - 3.0) * (x - GAUSS.denoiser()(x, 3.0)) / 3.0))
    torch.testing.assert_close(x1, expected, rtol=1e-3, atol=2e-3)
    assert records[1]["gamma"] == 1.0          # last step to σ = 0 left alone
    assert torch.isfinite(out).all()


def test_stein_records_carry_oracle_gamma_when_asked():
    mix = Mixture.ring(8, 2.0, 0.15)
    x = 80.0 * torch.randn(400, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    _, with_oracle = sample_steindiff(mix.denoiser(), x, edm_sigmas(3), "heun", SteinSettings(),
                                      oracle_substeps=16)
    _, without = sample_steindiff(mix.denoiser(), x, edm_sigmas(3), "heun", SteinSettings())
    assert all(math.isfinite(r["gamma_oracle"]) for r in with_oracle[:-1])
    assert all(math.isnan(r["gamma_oracle"]) for r in without)
