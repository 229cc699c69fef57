"""The solvers steindiff corrects: components/common/diffusion.py's Euler, EDM Heun and
DPM-Solver++(2M), plus the paper's other baselines, DPM-Solver++(3M) and UniPC (orders 2 and 3),
written once here in the same single-step form ``step(denoise, x, σ, σ_next, state)``.

All are data-prediction multistep methods in λ = -log σ. In the VE/EDM form (α = 1) their
updates are the VP ones of diffusers' ``DPMSolverMultistepScheduler`` / ``UniPCMultistepScheduler``
divided by α_t, which leaves every coefficient unchanged (λ is the same in both forms), so the
trajectories agree with the diffusers schedulers driven on the same σ's (tested on a Gaussian).
Orders follow diffusers' defaults: warm-up from first order, first order on the final step to
σ = 0, and the order lowered near the end (``lower_order_final``; DPM-Solver++ only below 15
steps). That needs the schedule's length, so the multistep state is started by
``start_state(solver, sigmas)``.

UniPC's corrector (UniC) refines the current state with the model output just computed at it,
before the predictor (UniP) moves on, at no extra evaluation. In diffusers it recomputes that
state from the previous one; here it is applied as the increment it adds to the previous
predictor's output, so a state rescaled by the Stein correction keeps its rescaling, and with
γ = 1 the two are the same.
"""
from __future__ import annotations

import math
from functools import partial

import torch

from components.common.diffusion import SOLVERS as COMMON_SOLVERS
from components.common.diffusion import Denoiser
from components.common.diffusion import nfe as common_nfe

MULTISTEP_ORDER = {"dpmpp3m": 3, "unipc": 2, "unipc3": 3}
DPM_LOWER_ORDER_BELOW = 15      # diffusers lowers DPM-Solver++'s second-to-last order below this


def start_state(solver: str, sigmas) -> dict | None:
    """The state a trajectory starts from: None for the common solvers, the schedule length
    for the multistep ones here (their order is lowered near the end)."""
    if solver not in MULTISTEP_ORDER:
        return None
    n_steps = len(sigmas) - 1
    return {"n_steps": n_steps, "steps_left": n_steps, "outputs": (), "sigmas": ()}


def _lam(sigma: float) -> float:
    return -math.log(sigma)


def _push(state: dict, denoised: torch.Tensor, sigma: float, keep: int) -> dict:
    """The state after a step: one fewer step left, the newest output first in the history."""
    return {**state, "steps_left": state["steps_left"] - 1,
            "outputs": ((denoised,) + state["outputs"])[:keep],
            "sigmas": ((sigma,) + state["sigmas"])[:keep]}


def _warm_order(order: int, state: dict, sigma_next: float) -> int:
    """Warm-up (one more previous output per step), first order on the jump to σ = 0."""
    if sigma_next == 0:
        return 1
    return min(order, len(state["outputs"]) + 1)


# ----------------------------------------------------------------------------- DPM-Solver++(3M)
def dpmpp3m_step(denoise: Denoiser, x, sigma: float, sigma_next: float, state: dict):
    """DPM-Solver++ multistep, third order (diffusers' ``solver_order=3``; its second order is
    the midpoint form)."""
    m0 = denoise(x, sigma)
    order = _warm_order(3, state, sigma_next)
    if state["steps_left"] == 2 and state["n_steps"] < DPM_LOWER_ORDER_BELOW:
        order = min(order, 2)
    new_state = _push(state, m0, sigma, keep=2)
    if sigma_next == 0:
        return m0, new_state
    h = _lam(sigma_next) - _lam(sigma)
    phi = math.expm1(-h)                      # e^{-h} - 1
    base = (sigma_next / sigma) * x - phi * m0
    if order == 1:
        return base, new_state
    (m1, *rest), (s1, *rest_s) = state["outputs"], state["sigmas"]
    r0 = (_lam(sigma) - _lam(s1)) / h
    d1_0 = (m0 - m1) / r0
    if order == 2:
        return base - 0.5 * phi * d1_0, new_state
    m2, s2 = rest[0], rest_s[0]
    r1 = (_lam(s1) - _lam(s2)) / h
    d1_1 = (m1 - m2) / r1
    d1 = d1_0 + (r0 / (r0 + r1)) * (d1_0 - d1_1)
    d2 = (d1_0 - d1_1) / (r0 + r1)
    return base + (phi / h + 1) * d1 - ((phi + h) / h**2 - 0.5) * d2, new_state


# ----------------------------------------------------------------------------- UniPC
def unipc_weights(h: float, rks: list[float], order: int, variant: str, corrector: bool):
    """UniPC's B(h) and the weights ρ of the divided differences (Zhao et al. 2023, as in
    diffusers): ``rks`` are the previous λ offsets over h, the last one 1 for the corrector."""
    hh = -h
    h_phi_1 = math.expm1(hh)
    b_h = hh if variant == "bh1" else h_phi_1
    h_phi_k, factorial, b = h_phi_1 / hh - 1, 1, []
    for i in range(1, order + 1):
        b.append(h_phi_k * factorial / b_h)
        factorial *= i + 1
        h_phi_k = h_phi_k / hh - 1 / factorial
    rks_t = torch.tensor(rks + [1.0], dtype=torch.float64)
    R = torch.stack([rks_t ** (i - 1) for i in range(1, order + 1)])
    b_t = torch.tensor(b, dtype=torch.float64)
    if corrector:
        rhos = [0.5] if order == 1 else torch.linalg.solve(R, b_t).tolist()
    elif order == 1:
        rhos = []
    else:
        rhos = [0.5] if order == 2 else torch.linalg.solve(R[:-1, :-1], b_t[:-1]).tolist()
    return h_phi_1, b_h, rhos


def _unipc_update(x_from, sigma_from: float, sigma_to: float, m0, history, order: int,
                  variant: str, m_new=None):
    """x at σ_to from x_from at σ_from with output m0 there; ``history`` = (outputs, sigmas)
    before σ_from, newest first. With ``m_new`` (the output at σ_to) it is the corrector."""
    h = _lam(sigma_to) - _lam(sigma_from)
    outputs, sigmas = history
    rks = [(_lam(s) - _lam(sigma_from)) / h for s in sigmas[:order - 1]]
    d1s = [(m - m0) / rk for m, rk in zip(outputs[:order - 1], rks)]
    h_phi_1, b_h, rhos = unipc_weights(h, rks, order, variant, corrector=m_new is not None)
    out = (sigma_to / sigma_from) * x_from - h_phi_1 * m0
    residual = sum((rho * d for rho, d in zip(rhos, d1s)), torch.zeros_like(m0))
    if m_new is not None:
        residual = residual + rhos[-1] * (m_new - m0)
    return out - b_h * residual


def unipc_step(denoise: Denoiser, x, sigma: float, sigma_next: float, state: dict,
               order: int = 2, variant: str = "bh2"):
    """UniPC multistep (diffusers' ``UniPCMultistepScheduler``, ``predict_x0``): the corrector
    of the previous step's order at σ, then the predictor to σ_next."""
    m = denoise(x, sigma)
    if "x_last" in state:           # correct the state with the output just computed at it
        outputs, sigmas = state["outputs"], state["sigmas"]
        corrected = _unipc_update(state["x_last"], sigmas[0], sigma, outputs[0],
                                  (outputs[1:], sigmas[1:]), state["order"], variant, m_new=m)
        x = x + (corrected - state["x_pred"])
    this_order = min(_warm_order(order, state, sigma_next), state["steps_left"])
    x_next = _unipc_update(x, sigma, sigma_next, m, (state["outputs"], state["sigmas"]),
                           this_order, variant) if sigma_next > 0 else m
    new_state = {**_push(state, m, sigma, keep=order), "x_last": x, "x_pred": x_next,
                 "order": this_order}
    return x_next, new_state


# ----------------------------------------------------------------------------- registry
SOLVERS = {**COMMON_SOLVERS, "dpmpp3m": dpmpp3m_step,
           "unipc": partial(unipc_step, order=2, variant="bh2"),
           "unipc3": partial(unipc_step, order=3, variant="bh2")}


def nfe(solver: str, n_steps: int) -> int:
    """Denoiser evaluations of a full trajectory (the multistep solvers here: one per step)."""
    return n_steps if solver in MULTISTEP_ORDER else common_nfe(solver, n_steps)


def detach_state(state):
    """A solver state without autograd history (tensors may sit in tuples)."""
    if state is None:
        return None

    def detach(value):
        if isinstance(value, torch.Tensor):
            return value.detach()
        if isinstance(value, tuple):
            return tuple(detach(v) for v in value)
        return value

    return {k: detach(v) for k, v in state.items()}


@torch.no_grad()
def solve(denoise: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, solver: str) -> torch.Tensor:
    """Vanilla trajectory from ``x`` at ``sigmas[0]`` down to 0 with any solver above."""
    step, state = SOLVERS[solver], start_state(solver, sigmas)
    sig = [float(s) for s in sigmas]
    for sigma, sigma_next in zip(sig[:-1], sig[1:]):
        x, state = step(denoise, x, sigma, sigma_next, state)
    return x
