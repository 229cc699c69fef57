"""DPM-Solver++(3M) and UniPC in the EDM σ form against diffusers' schedulers and against the
exact probability-flow ODE of Gaussian data (closed-form denoiser and flow map)."""
import math

import numpy as np
import pytest
import torch
from diffusers import DPMSolverMultistepScheduler, UniPCMultistepScheduler

from components.common.diffusion import edm_sigmas, logsnr_sigmas
from components.steindiff.mixture import Mixture
from components.steindiff.solvers import MULTISTEP_ORDER, nfe, solve
from components.steindiff.stein import SteinSettings, sample_steindiff

MU, STD = np.array([0.5, -1.0, 0.2]), 0.7
GAUSS = Mixture(means=MU[None], std=STD, weights=np.array([1.0]))
TWO_MODES = Mixture(means=np.array([[1.0, 0.0, 0.0], [-1.0, 0.5, 0.0]]), std=0.3,
                    weights=np.array([0.5, 0.5]))
NEW = sorted(MULTISTEP_ORDER)


def exact_flow(x: torch.Tensor, sigma: float, sigma_next: float) -> torch.Tensor:
    """The probability-flow ODE of N(μ, s² I) in closed form."""
    mu = torch.as_tensor(MU, dtype=x.dtype)
    return mu + (x - mu) * math.sqrt((STD**2 + sigma_next**2) / (STD**2 + sigma**2))


def diffusers_scheduler(solver: str):
    if solver == "dpmpp3m":
        return DPMSolverMultistepScheduler(solver_order=3, algorithm_type="dpmsolver++",
                                           prediction_type="sample")
    return UniPCMultistepScheduler(solver_order=MULTISTEP_ORDER[solver], solver_type="bh2",
                                   prediction_type="sample")


def run_diffusers(solver: str, x: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
    """The scheduler driven on our σ's (VP internally: x_VP = x / sqrt(1 + σ²)), the model
    being the closed-form denoiser of the VE state."""
    sched = diffusers_scheduler(solver)
    n = len(sigmas) - 1
    sched.set_timesteps(n)
    sched.sigmas, sched.timesteps = sigmas.clone(), torch.arange(n)
    denoise = GAUSS.denoiser(torch.float64)
    sample = x / math.sqrt(1 + float(sigmas[0]) ** 2)
    for i in range(n):
        scale = math.sqrt(1 + float(sigmas[i]) ** 2)
        denoised = denoise(sample * scale, float(sigmas[i]))
        sample = sched.step(denoised, sched.timesteps[i], sample).prev_sample
    return sample          # σ = 0: the VP and VE states coincide


def start(n: int = 64, sigma: float = 80.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    return sigma * torch.randn(n, 3, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("solver", NEW)
@pytest.mark.parametrize("n_steps", [3, 5, 10])
def test_solver_matches_the_diffusers_scheduler(solver, n_steps):
    sigmas, x = edm_sigmas(n_steps), start()
    ours = solve(GAUSS.denoiser(torch.float64), x, sigmas, solver)
    # DPMSolverMultistepScheduler upcasts to float32 inside step(); UniPC stays in float64
    tol = 1e-5 if solver == "dpmpp3m" else 1e-10
    torch.testing.assert_close(ours, run_diffusers(solver, x, sigmas).to(ours.dtype),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("solver", NEW)
def test_solver_converges_to_the_exact_flow_map(solver):
    x = start()
    exact = exact_flow(x, 80.0, 0.0)
    errors = [float((solve(GAUSS.denoiser(torch.float64), x, logsnr_sigmas(n, 0.002, 80.0),
                           solver) - exact).abs().max()) for n in (12, 24, 48)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 5e-3


@pytest.mark.parametrize("solver", NEW)
def test_gamma_one_stein_arm_is_the_vanilla_solver(solver):
    """γ clipped to exactly 1 must give the vanilla trajectory: the multistep state (and
    UniPC's corrector) is threaded through the corrected steps as through the plain ones."""
    sigmas, x = edm_sigmas(5), start(32)
    denoise = GAUSS.denoiser(torch.float64)
    settings = SteinSettings(gamma_min=1.0, gamma_max=1.0, n_probes=1)
    corrected, records = sample_steindiff(denoise, x, sigmas, solver, settings)
    torch.testing.assert_close(corrected, solve(denoise, x, sigmas, solver))
    assert len(records) == 5 and all(r["gamma"] == 1.0 for r in records)


def test_unipc_corrector_keeps_a_rescaled_state():
    """The corrector adds its increment to the state it is given: two states that differ
    before a step differ by the same amount after the correction (not reset to one value)."""
    from components.steindiff.solvers import start_state, unipc_step

    sigmas, x = edm_sigmas(4), start(8)
    denoise = TWO_MODES.denoiser(torch.float64)     # non-linear, so Δm is not a multiple of x
    state = start_state("unipc", sigmas)
    x1, state = unipc_step(denoise, x, 80.0, float(sigmas[1]), state)
    _, plain = unipc_step(denoise, x1, float(sigmas[1]), float(sigmas[2]), state)
    _, scaled = unipc_step(denoise, 0.9 * x1, float(sigmas[1]), float(sigmas[2]), state)
    m_plain, m_scaled = denoise(x1, float(sigmas[1])), denoise(0.9 * x1, float(sigmas[1]))
    shift = scaled["x_last"] - plain["x_last"]
    # x_last = x + (UniC(m) - x_pred): the difference is the state's plus the corrector's
    # response to the model output (ρ_c B(h) (m_scaled - m_plain), a multiple of it)
    residual = shift - (-0.1 * x1)
    ratio = residual / (m_scaled - m_plain)
    torch.testing.assert_close(ratio, ratio[0, 0].expand_as(ratio))


def test_nfe_of_the_multistep_solvers():
    assert [nfe(s, 5) for s in NEW] == [5] * len(NEW) and nfe("heun", 5) == 9


def test_config_accepts_exactly_the_registered_solvers():
    from typing import get_args

    from components.steindiff.config import SolverName, SteindiffConfig
    from components.steindiff.solvers import SOLVERS

    assert set(get_args(SolverName)) == set(SOLVERS)
    with pytest.raises(ValueError):
        SteindiffConfig.for_profile("small", {"sample": {"solvers": ["heun", "unipc5"]}})
