"""Cost of one guided DDIM step, latent vs pixel: counted MACs and wall time.

MACs are counted with ``torch.utils.flop_counter`` (matmuls, convolutions, attention; forward
and the backward passes guidance needs), as half the counted FLOPs. One step's cost is the
difference between a 2-step and a 1-step guided trajectory, so the final decode and set-up
are not charged to the step. Weights do not change a MAC count, so the comparison at a real
compression ratio (e.g. 64^2 fields -> 8^2 latents) uses freshly initialised models of the
trained architectures at that size, with equal denoiser width.
"""
from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from components.dibilps.backbones import build, latent_spec, pad_multiple, pixel_spec, vae_spec
from components.dibilps.data import n_observed
from components.dibilps.diffusion import Guidance, VPSchedule, guided_sample
from components.dibilps.pde import residual_norm

FULL_GUIDANCE = Guidance(zeta_obs=1.0, zeta_pde=1.0, early_exit_frac=1.0)


class GuidedSampler:
    """What one guided trajectory needs: ``eps_fn``, ``decode_fn``, the two losses, ``z_T``."""

    def __init__(self, eps_fn, decode_fn, obs_loss_fn, pde_loss_fn, z_T: torch.Tensor):
        self.eps_fn, self.decode_fn = eps_fn, decode_fn
        self.obs_loss_fn, self.pde_loss_fn, self.z_T = obs_loss_fn, pde_loss_fn, z_T

    def run(self, schedule: VPSchedule, n_steps: int, guidance: Guidance = FULL_GUIDANCE):
        # the "* 1.0" keeps module inputs non-leaf: the flop counter's module tracker cannot
        # hook a leaf while autograd.grad runs
        return guided_sample(lambda z, t: self.eps_fn(z * 1.0, t), self.decode_fn,
                             self.obs_loss_fn, self.pde_loss_fn, schedule, n_steps, self.z_T,
                             guidance)


def counted_macs(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops() // 2)


def macs_per_guided_step(sampler: GuidedSampler, schedule: VPSchedule) -> float:
    """MACs of one fully guided step (obs + PDE guidance) per sample."""
    one = counted_macs(lambda: sampler.run(schedule, 1))
    two = counted_macs(lambda: sampler.run(schedule, 2))
    return (two - one) / sampler.z_T.shape[0]


def seconds_per_guided_step(sampler: GuidedSampler, schedule: VPSchedule, n_steps: int,
                            repeats: int) -> float:
    """Median wall time of one fully guided step per sample (``n_steps``-step trajectories)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sampler.run(schedule, n_steps)
        times.append((time.perf_counter() - start) / n_steps / sampler.z_T.shape[0])
    return float(np.median(times))


def _losses(pde: str, idx: torch.Tensor, helmholtz_k: float):
    """Observation loss on channel 0 at ``idx`` (zero targets) and the PDE residual of the
    decoded fields taken as physical (unit scales): the cost does not depend on the values."""
    def obs_loss(fields):
        return fields[:, 0].flatten(1).gather(1, idx).norm(dim=1)

    def pde_loss(fields):
        return residual_norm(pde, fields[:, 0], fields[:, 1], helmholtz_k)
    return obs_loss, pde_loss


def samplers_at(cfg, res: int, down: int, batch: int, seed: int = 0, pde: str = "poisson",
                device: torch.device | str = "cpu"):
    """Fresh latent and pixel samplers for ``res``^2 fields; the latent side is ``res / 2^down``.
    Both denoisers have the latent denoiser's widths (own: ``diffusion.latent_channels`` base
    width, the pixel UNet with the trained pixel baseline's depth; diffusers: the latent UNet's
    ``paper.unet_block_out_channels``). Random draws are made on the CPU, then moved."""
    torch.manual_seed(seed)
    v, e = cfg.vae, cfg.cond_encoder
    vae = build(vae_spec(cfg, res, down)).eval()
    s = vae.latent_size(res)
    latent = build(latent_spec(cfg, v.latent_channels, e.d_model, s)).eval()
    pixel = build(pixel_spec(cfg, res, equal_width=True)).eval()
    for m in (vae, latent, pixel):
        m.requires_grad_(False).to(device)
    k = n_observed(res, cfg.masks.obs_fraction)
    idx = torch.rand(batch, res * res).argsort(dim=1)[:, :k].to(device)
    cond = latent.condition(torch.randn(batch, k, e.d_model).to(device), torch.ones(batch, device=device))
    obs_loss, pde_loss = _losses(pde, idx, cfg.data.helmholtz_k)
    lat = GuidedSampler(lambda z, t: latent(z, t, cond), lambda z0: vae.decode(z0, res),
                        obs_loss, pde_loss, torch.randn(batch, v.latent_channels, s, s).to(device))
    size = res + (-res) % pad_multiple(pixel)
    pix = GuidedSampler(lambda x, t: pixel(x, t), lambda x0: x0[..., :res, :res],
                        obs_loss, pde_loss, torch.randn(batch, 2, size, size).to(device))
    return lat, pix


def compare_cost(cfg, schedule: VPSchedule, res: int, down: int, batch: int, n_steps: int,
                 repeats: int, device: torch.device | str = "cpu") -> dict:
    lat, pix = samplers_at(cfg, res, down, batch, device=device)
    out = {"res": res, "latent_side": lat.z_T.shape[-1], "batch": batch}
    out["latent_macs_per_step"] = macs_per_guided_step(lat, schedule)
    out["pixel_macs_per_step"] = macs_per_guided_step(pix, schedule)
    out["macs_ratio"] = out["latent_macs_per_step"] / out["pixel_macs_per_step"]
    out["latent_sec_per_step"] = seconds_per_guided_step(lat, schedule, n_steps, repeats)
    out["pixel_sec_per_step"] = seconds_per_guided_step(pix, schedule, n_steps, repeats)
    out["sec_ratio"] = out["latent_sec_per_step"] / out["pixel_sec_per_step"]
    return out
