"""Variance-preserving diffusion (DDPM training, DDIM sampling) with PDE-informed guidance.

``z_t = sqrt(abar_t) z_0 + sqrt(1 - abar_t) eps``. The network predicts ``eps``. One guided
DDIM step (official ``pipeline_PDE_guided_sd.py``, η = 0):

    eps = net(z_t);  z0_hat = (z_t - sqrt(1-abar_t) eps) / sqrt(abar_t)         (Tweedie)
    z_{t-1} = sqrt(abar_{t-1}) z0_hat + sqrt(1-abar_{t-1}) eps                 (DDIM)
              - sqrt(abar_{t-1}) zeta_obs grad_{z0_hat} L_obs(Dec(z0_hat))
              + c_pde zeta_pde grad_{z_t} L_pde(Dec(z0_hat(z_t)))
    c_pde = (sigma_{t-1} - sigma_t) sqrt(abar_{t-1} (1 - abar_t)),  sigma = sqrt((1-abar)/abar) < 0

Early exit: after ``early_exit_frac`` of the steps the current ``z0_hat`` is returned. In the
variance-exploding variable ``x = z / sqrt(abar)`` the DDIM step is exactly an Euler step of the
probability-flow ODE in sigma (checked against ``components.common.diffusion.euler_step``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch


def scaled_linear_betas(n: int = 1000, beta_start: float = 0.00085, beta_end: float = 0.012) -> torch.Tensor:
    """Stable Diffusion's ``scaled_linear`` schedule (linear in sqrt(beta))."""
    return torch.linspace(beta_start**0.5, beta_end**0.5, n, dtype=torch.float64) ** 2


class VPSchedule:
    def __init__(self, n: int = 1000, beta_start: float = 0.00085, beta_end: float = 0.012):
        self.n = n
        self.betas = scaled_linear_betas(n, beta_start, beta_end)
        self.abar = torch.cumprod(1 - self.betas, dim=0)          # abar[t], t = 0..n-1

    def q_sample(self, z0: torch.Tensor, t: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        ab = self.abar[t.cpu()].to(z0.device, z0.dtype).view(-1, *([1] * (z0.ndim - 1)))
        return ab.sqrt() * z0 + (1 - ab).sqrt() * eps

    def loss(self, net: Callable, z0: torch.Tensor, *cond) -> torch.Tensor:
        """DDPM ε-prediction loss with t uniform over the training steps."""
        t = torch.randint(0, self.n, (z0.shape[0],)).to(z0.device)   # CPU draws on every device
        eps = torch.randn_like(z0)
        return ((net(self.q_sample(z0, t, eps), t, *cond) - eps) ** 2).mean()

    def timesteps(self, n_steps: int) -> list[int]:
        """DDIM's "leading" spacing (diffusers default): n_steps descending training indices."""
        ratio = self.n // n_steps
        return [int(t) for t in (torch.arange(n_steps) * ratio).flip(0)]

    def abar_at(self, t: int) -> float:
        return float(self.abar[t]) if t >= 0 else 1.0   # t = -1: the clean end point


def tweedie(z_t: torch.Tensor, eps: torch.Tensor, abar: float) -> torch.Tensor:
    return (z_t - math.sqrt(1 - abar) * eps) / math.sqrt(abar)


def ddim_step(z_t: torch.Tensor, eps: torch.Tensor, abar: float, abar_prev: float) -> torch.Tensor:
    z0 = tweedie(z_t, eps, abar)
    return math.sqrt(abar_prev) * z0 + math.sqrt(1 - abar_prev) * eps


def pde_step_coefficient(abar: float, abar_prev: float) -> float:
    """``c_pde`` of the official pipeline; negative for abar_prev > abar (a descent step)."""
    sig = math.sqrt((1 - abar) / abar)
    sig_prev = math.sqrt((1 - abar_prev) / abar_prev)
    return (sig_prev - sig) * math.sqrt(abar_prev * (1 - abar))


@dataclass
class Guidance:
    zeta_obs: float = 0.0
    zeta_pde: float = 0.0
    early_exit_frac: float = 1.0
    double_obs_step: bool = False


@dataclass
class Trajectory:
    z0: torch.Tensor
    obs_loss: list[float] = field(default_factory=list)      # batch-mean L_obs per step
    pde_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    steps_run: int = 0


def guided_sample(eps_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  decode_fn: Callable[[torch.Tensor], torch.Tensor],
                  obs_loss_fn: Callable[[torch.Tensor], torch.Tensor],
                  pde_loss_fn: Callable[[torch.Tensor], torch.Tensor],
                  schedule: VPSchedule, n_steps: int, z_T: torch.Tensor,
                  guidance: Guidance) -> Trajectory:
    """Guided DDIM from ``z_T``. ``decode_fn(z0_hat) -> fields``; ``obs_loss_fn`` and
    ``pde_loss_fn`` map fields to per-sample losses (B,). Losses are summed over the batch
    before differentiation, so each sample receives the gradient of its own loss."""
    ts = schedule.timesteps(n_steps)
    exit_at = math.ceil(guidance.early_exit_frac * n_steps) if guidance.early_exit_frac < 1 else n_steps
    traj = Trajectory(z0=z_T)
    start = time.perf_counter()
    z = z_T.detach()
    need_grad = guidance.zeta_obs > 0 or guidance.zeta_pde > 0
    for i, t in enumerate(ts):
        abar, abar_prev = schedule.abar_at(t), schedule.abar_at(ts[i + 1] if i + 1 < n_steps else -1)
        tt = torch.full((z.shape[0],), t, dtype=torch.long, device=z.device)
        with torch.set_grad_enabled(need_grad):
            z_in = z.requires_grad_(guidance.zeta_pde > 0)
            eps = eps_fn(z_in, tt)
            z0_graph = tweedie(z_in, eps, abar)
            if guidance.zeta_pde == 0:    # L_obs alone: z0_hat is a leaf, the net is not crossed
                z0_graph = z0_graph.detach().requires_grad_(need_grad)
            fields = decode_fn(z0_graph)
            l_obs, l_pde = obs_loss_fn(fields), pde_loss_fn(fields)
            traj.obs_loss.append(float(l_obs.detach().mean()))
            traj.pde_loss.append(float(l_pde.detach().mean()))
            g_obs = g_pde = None
            # L_obs is differentiated w.r.t. z0_hat, L_pde w.r.t. z_t through the network
            if guidance.zeta_obs > 0:
                (g_obs,) = torch.autograd.grad(l_obs.sum(), z0_graph, retain_graph=guidance.zeta_pde > 0)
            if guidance.zeta_pde > 0:
                (g_pde,) = torch.autograd.grad(l_pde.sum(), z_in)
        eps, z0_hat = eps.detach(), z0_graph.detach()
        traj.steps_run = i + 1
        if i + 1 >= exit_at:            # early exit: return the current clean estimate
            z = z0_hat
            break
        z_next = math.sqrt(abar_prev) * z0_hat + math.sqrt(1 - abar_prev) * eps
        if g_obs is not None:
            times = 2 if guidance.double_obs_step else 1
            z_next = z_next - times * math.sqrt(abar_prev) * guidance.zeta_obs * g_obs
        if g_pde is not None:
            z_next = z_next + pde_step_coefficient(abar, abar_prev) * guidance.zeta_pde * g_pde
        z = z_next.detach()
    traj.z0 = z.detach()
    with torch.no_grad():               # the loss of what is returned closes the trajectory
        fields = decode_fn(traj.z0)
        traj.obs_loss.append(float(obs_loss_fn(fields).mean()))
        traj.pde_loss.append(float(pde_loss_fn(fields).mean()))
    traj.seconds = time.perf_counter() - start
    return traj
