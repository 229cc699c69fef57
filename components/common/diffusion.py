"""Diffusion building blocks in the EDM (Karras et al. 2022) parameterisation.

Everything here is generic: noise schedules, forward noising, preconditioned denoisers, the
denoising loss, and deterministic probability-flow ODE solvers. Data live in the variance-exploding
form ``x_σ = x_0 + σ n``; a *denoiser* is any callable ``D(x, sigma) -> E[x_0 | x_σ = x]`` where
``sigma`` is a Python float (one noise level for the whole batch). The score is
``(D(x, σ) - x) / σ²`` and the ODE is ``dx/dσ = (x - D(x, σ)) / σ``.

Solvers are written as single steps ``step(denoise, x, sigma, sigma_next, state)`` so that
methods can wrap, inspect or differentiate one step (e.g. inference-time corrections).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

Denoiser = Callable[[torch.Tensor, float], torch.Tensor]


# ----------------------------------------------------------------------------- schedules
def edm_sigmas(n_steps: int, sigma_min: float = 0.002, sigma_max: float = 80.0,
               rho: float = 7.0) -> torch.Tensor:
    """EDM time steps: ``n_steps`` noise levels interpolated in σ^(1/ρ), then a final 0."""
    if n_steps < 1:
        raise ValueError("n_steps must be >= 1")
    i = torch.arange(n_steps, dtype=torch.float64)
    frac = i / max(n_steps - 1, 1)
    sig = (sigma_max ** (1 / rho) + frac * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
    return torch.cat([sig, torch.zeros(1, dtype=torch.float64)])


def logsnr_sigmas(n_steps: int, sigma_min: float = 0.002, sigma_max: float = 80.0) -> torch.Tensor:
    """Noise levels uniform in log σ (i.e. in log-SNR for the VE process), then a final 0."""
    sig = torch.exp(torch.linspace(math.log(sigma_max), math.log(sigma_min), n_steps,
                                   dtype=torch.float64))
    return torch.cat([sig, torch.zeros(1, dtype=torch.float64)])


SCHEDULES = {"edm": edm_sigmas, "logsnr": lambda n, sigma_min, sigma_max, rho=7.0:
             logsnr_sigmas(n, sigma_min, sigma_max)}


def make_sigmas(schedule: str, n_steps: int, sigma_min: float, sigma_max: float,
                rho: float = 7.0) -> torch.Tensor:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} ({', '.join(SCHEDULES)})")
    return SCHEDULES[schedule](n_steps, sigma_min=sigma_min, sigma_max=sigma_max, rho=rho)


def forward_noise(x0: torch.Tensor, sigma: torch.Tensor | float,
                  noise: torch.Tensor | None = None) -> torch.Tensor:
    """Sample ``x_σ = x_0 + σ n``; ``sigma`` may be per-sample (shape [B]) or a scalar."""
    noise = torch.randn_like(x0) if noise is None else noise
    if isinstance(sigma, torch.Tensor) and sigma.ndim == 1:
        sigma = sigma.view(-1, *([1] * (x0.ndim - 1)))
    return x0 + sigma * noise


# ----------------------------------------------------------------------------- networks
def edm_precond(sigma: torch.Tensor, sigma_data: float = 0.5):
    """EDM preconditioning coefficients (c_skip, c_out, c_in, c_noise) at noise level σ."""
    s2, d2 = sigma**2, sigma_data**2
    c_skip = d2 / (s2 + d2)
    c_out = sigma * sigma_data / torch.sqrt(s2 + d2)
    c_in = 1 / torch.sqrt(s2 + d2)
    c_noise = torch.log(sigma) / 4
    return c_skip, c_out, c_in, c_noise


def edm_loss_weight(sigma: torch.Tensor, sigma_data: float = 0.5) -> torch.Tensor:
    """λ(σ) = (σ² + σ_d²) / (σ σ_d)², which makes the effective target of F unit-variance."""
    return (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2


class SinusoidalEmbedding(nn.Module):
    def __init__(self, dim: int, max_period: float = 1e4):
        super().__init__()
        half = dim // 2
        self.register_buffer("freqs", torch.exp(-math.log(max_period) * torch.arange(half) / half))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        args = t.view(-1, 1) * self.freqs.view(1, -1) * 100  # c_noise is O(1); spread it out
        return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class MLPNet(nn.Module):
    """Raw network F(x_in, c_noise) for flat data: an MLP with a sinusoidal noise embedding
    added to every hidden layer (cheap conditioning that works well on small data)."""

    def __init__(self, dim: int, width: int = 256, depth: int = 3, emb_dim: int = 64):
        super().__init__()
        self.embed = nn.Sequential(SinusoidalEmbedding(emb_dim), nn.Linear(emb_dim, width), nn.SiLU())
        self.inp = nn.Linear(dim, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth - 1))
        self.emb_proj = nn.ModuleList(nn.Linear(width, width) for _ in range(depth - 1))
        self.out = nn.Linear(width, dim)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor, c_noise: torch.Tensor) -> torch.Tensor:
        emb = self.embed(c_noise)
        h = self.act(self.inp(x) + emb)
        for layer, proj in zip(self.hidden, self.emb_proj):
            h = self.act(layer(h) + proj(emb))
        return self.out(h)


class EDMDenoiser(nn.Module):
    """D(x; σ) = c_skip x + c_out F(c_in x; c_noise) around any raw net ``F(x, c_noise)``."""

    def __init__(self, net: nn.Module, sigma_data: float = 0.5):
        super().__init__()
        self.net, self.sigma_data = net, sigma_data

    def forward(self, x: torch.Tensor, sigma: torch.Tensor | float) -> torch.Tensor:
        sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
        if sigma.ndim == 0:
            sigma = sigma.expand(x.shape[0])
        c_skip, c_out, c_in, c_noise = edm_precond(sigma, self.sigma_data)
        shape = (-1, *([1] * (x.ndim - 1)))
        return c_skip.view(shape) * x + c_out.view(shape) * self.net(c_in.view(shape) * x, c_noise)


def edm_loss(denoiser: EDMDenoiser, x0: torch.Tensor, p_mean: float = -1.2,
             p_std: float = 1.2) -> torch.Tensor:
    """EDM denoising loss: ln σ ~ N(P_mean, P_std²), weighted by λ(σ)."""
    sigma = torch.exp(p_mean + p_std * torch.randn(x0.shape[0], device=x0.device))
    x_noisy = forward_noise(x0, sigma)
    weight = edm_loss_weight(sigma, denoiser.sigma_data).view(-1, *([1] * (x0.ndim - 1)))
    return (weight * (denoiser(x_noisy, sigma) - x0) ** 2).mean()


# ----------------------------------------------------------------------------- solvers
# Each step maps x at σ to x at σ_next; ``state`` carries multistep history (or None).

def euler_step(denoise: Denoiser, x, sigma: float, sigma_next: float, state=None):
    d = (x - denoise(x, sigma)) / sigma
    return x + (sigma_next - sigma) * d, state


def heun_step(denoise: Denoiser, x, sigma: float, sigma_next: float, state=None):
    """EDM Algorithm 1: trapezoidal correction, plain Euler on the last step to σ = 0."""
    d = (x - denoise(x, sigma)) / sigma
    x_euler = x + (sigma_next - sigma) * d
    if sigma_next == 0:
        return x_euler, state
    d_next = (x_euler - denoise(x_euler, sigma_next)) / sigma_next
    return x + (sigma_next - sigma) * (d + d_next) / 2, state


def dpmpp2m_step(denoise: Denoiser, x, sigma: float, sigma_next: float, state=None):
    """DPM-Solver++(2M) in data prediction with λ = -log σ (VE); ``state`` holds the previous
    denoised output and its σ. First and last steps are first order."""
    denoised = denoise(x, sigma)
    new_state = {"denoised": denoised, "sigma": sigma}
    if sigma_next == 0:
        return denoised, new_state
    h = math.log(sigma) - math.log(sigma_next)
    if state is not None:
        h_last = math.log(state["sigma"]) - math.log(sigma)
        r = h_last / h
        denoised = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * state["denoised"]
    return (sigma_next / sigma) * x - math.expm1(-h) * denoised, new_state


SOLVERS = {"euler": euler_step, "heun": heun_step, "dpmpp2m": dpmpp2m_step}
NFE_PER_STEP = {"euler": 1, "heun": 2, "dpmpp2m": 1}


def nfe(solver: str, n_steps: int) -> int:
    """Denoiser evaluations of a full trajectory (Heun's last step is Euler)."""
    return NFE_PER_STEP[solver] * n_steps - (1 if solver == "heun" else 0)


def detach_state(state):
    if state is None:
        return None
    return {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in state.items()}


@torch.no_grad()
def sample_ode(denoise: Denoiser, x: torch.Tensor, sigmas: torch.Tensor,
               solver: str = "heun") -> torch.Tensor:
    """Baseline deterministic sampler: integrate from ``x`` at ``sigmas[0]`` down to 0."""
    step, state = SOLVERS[solver], None
    sig = [float(s) for s in sigmas]
    for sigma, sigma_next in zip(sig[:-1], sig[1:]):
        x, state = step(denoise, x, sigma, sigma_next, state)
    return x
