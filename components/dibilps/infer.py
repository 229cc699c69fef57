"""Stage infer: guided sampling with the latent model (variants) and the pixel-space baseline.

Per PDE: (1) guidance weights are calibrated on the validation split, (2) every variant runs on
the test split for every seed and both directions, (3) the full variant is also decoded on the
refined grid (zero-shot super-resolution), (4) latent vs pixel wall time is benchmarked on one
batch, alternating the two so that machine load hits both alike.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from components.common.io import load_torch, write_json_atomic
from components.dibilps.backbones import pad_multiple
from components.dibilps.cost import compare_cost
from components.dibilps.data import hr_res, load_masks, load_normaliser, load_split
from components.dibilps.diffusion import Guidance, Trajectory, guided_sample
from components.dibilps.models import LatentDenoiser, UNet, observation_grid
from components.dibilps.pde import Normaliser, residual_norm
from components.dibilps.train import (gather_points, load_encoder, load_model, load_vae,
                                      mask_to_index, normalised_fields, observation_tokens,
                                      observed_points,
                                      schedule_from, stage_device)

DIRECTIONS = {"forward": 1.0, "inverse": -1.0}
OBSERVED_CHANNEL = {"forward": 1, "inverse": 0}     # forward observes a, inverse observes u
TARGET_CHANNEL = {"forward": 0, "inverse": 1}
LATENT_VARIANTS = {           # (uses obs guidance, uses pde guidance, early exit)
    "full": (True, True, True), "no_pde": (True, False, True), "no_obs": (False, True, True),
    "no_guidance": (False, False, True), "no_early_exit": (True, True, False)}
PIXEL_VARIANTS = ("full", "no_guidance")


# ----------------------------------------------------------------------------- scoring
def rel_l2(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Per-sample ||pred - true|| / ||true|| over the last two axes."""
    d = (pred - true).reshape(len(true), -1)
    return np.linalg.norm(d, axis=1) / np.linalg.norm(true.reshape(len(true), -1), axis=1)


def darcy_error_rate(a_pred: np.ndarray, a_true: np.ndarray) -> np.ndarray:
    """Inverse Darcy is binary segmentation: share of nodes on the wrong side of 7.5."""
    return ((a_pred >= 7.5) != (a_true >= 7.5)).reshape(len(a_true), -1).mean(axis=1)


def primary_error(pde: str, direction: str, pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """pred/true (S, 2, n, n) physical. Forward: rel-L2 of u; inverse: rel-L2 of a (Darcy: error rate)."""
    if direction == "forward":
        return rel_l2(pred[:, 0], true[:, 0])
    if pde == "darcy":
        return darcy_error_rate(pred[:, 1], true[:, 1])
    return rel_l2(pred[:, 1], true[:, 1])


def paste_observations(pred: np.ndarray, true: np.ndarray, masks: np.ndarray, direction: str) -> np.ndarray:
    """Official scoring: observed nodes of the observed field are overwritten with the truth."""
    out = pred.copy()
    c = OBSERVED_CHANNEL[direction]
    out[:, c][masks] = true[:, c][masks]
    return out


# ----------------------------------------------------------------------------- samplers
@dataclass
class Models:
    pde: str
    norm: Normaliser
    vae: torch.nn.Module
    encoder: torch.nn.Module
    latent: LatentDenoiser
    pixel: UNet
    scale: float
    helmholtz_k: float
    schedule: object
    n: int
    device: torch.device = torch.device("cpu")
    lift_sigma: float = 0.0          # kernel width of the spatial condition (from the checkpoint)


def load_models(cfg, ctx, pde: str) -> Models:
    data_dir, device = ctx.inputs["generate_pde_data"][pde], stage_device(cfg)
    latent, latent_blob = load_model(ctx.inputs["train_latent_diffusion"][pde] / "latent_unet.pt",
                                     LatentDenoiser, device)
    pixel, _ = load_model(ctx.inputs["train_pixel_diffusion"][pde] / "pixel_unet.pt", UNet, device)
    blob = load_torch(ctx.inputs["encode_latents"][pde] / "latents.pt")
    vae = load_vae(ctx.inputs["train_vae"][pde], device)
    for m in (latent, pixel, vae):
        for p in m.parameters():
            p.requires_grad_(False)
    u, _ = load_split(data_dir, "test")
    # the towers fine-tuned with the denoiser, not the contrastive stage's
    return Models(pde, load_normaliser(data_dir), vae,
                  load_encoder(ctx.inputs["train_latent_diffusion"][pde], device),
                  latent, pixel, float(blob["scale"]), cfg.data.helmholtz_k, schedule_from(cfg),
                  int(u.shape[-1]), device, float(latent_blob.get("lift_sigma", 0.0)))


def loss_fns(m: Models, fields_true: torch.Tensor, idx: torch.Tensor, direction: str):
    """L_obs (per-sample L2 norm at the observed nodes, normalised units) and L_pde
    (per-sample ||R||/n^2 in physical units)."""
    c = OBSERVED_CHANNEL[direction]
    _, obs_vals = gather_points(fields_true[:, c], idx)

    def obs_loss(fields):
        return (fields[:, c].flatten(1).gather(1, idx) - obs_vals).norm(dim=1)

    def pde_loss(fields):
        u, a = m.norm.decode(fields[:, 0], fields[:, 1])
        return residual_norm(m.pde, u, a, m.helmholtz_k)

    return obs_loss, pde_loss


def run_latent(m: Models, fields_true, idx, direction: str, guidance: Guidance, n_steps: int,
               seed: int, hr: int | None = None, conditional: bool = True,
               ) -> tuple[torch.Tensor, Trajectory, torch.Tensor | None]:
    """Sample the joint latent given the observations; returns normalised fields (B, 2, n, n).
    ``conditional=False`` samples the same network's unconditional prior (null token)."""
    b = fields_true.shape[0]
    dir_t = torch.full((b,), DIRECTIONS[direction], device=m.device)
    s = m.vae.latent_size(m.n)
    with torch.no_grad():
        obs = observation_tokens(m.encoder, fields_true, idx, dir_t) if conditional else None
        cond = m.latent.condition(obs, dir_t, n_points=idx.shape[1])
        grid = None                       # None: the null grid of the unconditional prior
        if conditional and getattr(m.latent, "grid_channels", 0):
            coords, values = observed_points(fields_true, idx, dir_t)
            grid = observation_grid(coords, values, dir_t, s, m.n, m.lift_sigma)
    g = torch.Generator().manual_seed(seed)
    z_T = torch.randn(b, m.vae.latent_channels, s, s, generator=g).to(m.device)   # CPU draws
    obs_loss, pde_loss = loss_fns(m, fields_true, idx, direction)
    decode = lambda z0: m.vae.decode(z0 / m.scale, m.n)  # noqa: E731
    traj = guided_sample(lambda z, t: m.latent(z, t, cond, grid), decode, obs_loss, pde_loss,
                         m.schedule, n_steps, z_T, guidance)
    with torch.no_grad():
        fields = decode(traj.z0)
        fields_hr = m.vae.decode(traj.z0 / m.scale, hr) if hr else None
    return fields, traj, fields_hr


def run_pixel(m: Models, fields_true, idx, direction: str, guidance: Guidance, n_steps: int,
              seed: int) -> tuple[torch.Tensor, Trajectory]:
    b, n = fields_true.shape[0], m.n
    size = n + (-n) % pad_multiple(m.pixel)
    g = torch.Generator().manual_seed(seed)
    x_T = torch.randn(b, 2, size, size, generator=g).to(m.device)
    obs_loss, pde_loss = loss_fns(m, fields_true, idx, direction)
    decode = lambda x0: x0[..., :n, :n]  # noqa: E731
    traj = guided_sample(lambda x, t: m.pixel(x, t), decode, obs_loss, pde_loss, m.schedule,
                         n_steps, x_T, guidance)
    return decode(traj.z0), traj


def physical(m: Models, fields: torch.Tensor) -> np.ndarray:
    u, a = m.norm.decode(fields[:, 0], fields[:, 1])
    return torch.stack([u, a], dim=1).cpu().numpy()


def batched(n_items: int, batch: int):
    for i in range(0, n_items, batch):
        yield slice(i, min(i + batch, n_items))


# ----------------------------------------------------------------------------- calibration
CALIBRATION_SEED = 10_000      # sampling seed of every validation run; never a test seed


def sample_split(m: Models, sampler: str, fields, idx, direction: str, g: Guidance, gcfg,
                 conditional: bool = True) -> np.ndarray:
    """Physical samples of a whole validation split in batches of ``guidance.batch_size``
    (batch k uses sampling seed CALIBRATION_SEED + k)."""
    out = []
    for k, sl in enumerate(batched(len(fields), gcfg.batch_size)):
        if sampler == "latent":
            f, _, _ = run_latent(m, fields[sl], idx[sl], direction, g, gcfg.steps, CALIBRATION_SEED + k,
                                 conditional=conditional)
        else:
            f, _ = run_pixel(m, fields[sl], idx[sl], direction, g, gcfg.steps, CALIBRATION_SEED + k)
        out.append(physical(m, f))
    return np.concatenate(out)


def is_interior(grid: list[float], chosen: float) -> bool:
    """The chosen weight is neither end of its grid: the optimum is bracketed."""
    return len(grid) >= 3 and min(grid) < chosen < max(grid)


def calibrate(m: Models, sampler: str, fields_val, idx_val, true_val: np.ndarray, direction: str,
              gcfg) -> dict:
    """zeta_obs on its grid with zeta_pde = 0, then zeta_pde on its grid at the chosen zeta_obs;
    criterion: the primary validation error."""
    def score(zo: float, zp: float) -> float:
        g = Guidance(zo, zp, gcfg.early_exit_frac, gcfg.double_obs_step)
        pred = sample_split(m, sampler, fields_val, idx_val, direction, g, gcfg)
        err = float(primary_error(m.pde, direction, pred, true_val).mean())
        return err if np.isfinite(err) else float("inf")

    obs_scores = {zo: score(zo, 0.0) for zo in gcfg.zeta_obs_grid}
    zeta_obs = min(obs_scores, key=obs_scores.get)
    pde_scores = {zp: score(zeta_obs, zp) for zp in gcfg.zeta_pde_grid}
    zeta_pde = min(pde_scores, key=pde_scores.get)
    return {"zeta_obs": zeta_obs, "zeta_pde": zeta_pde,
            "zeta_obs_interior": is_interior(gcfg.zeta_obs_grid, zeta_obs),
            "zeta_pde_interior": is_interior(gcfg.zeta_pde_grid, zeta_pde),
            "val_obs_scores": {str(k): v for k, v in obs_scores.items()},
            "val_pde_scores": {str(k): v for k, v in pde_scores.items()}}


def prior_premise(m: Models, fields_val, idx_val, true_val: np.ndarray, direction: str, gcfg) -> dict:
    """Validation errors of the unguided samplers against predicting zero (normalised units,
    i.e. the training scale's centre): the conditional prior must use its condition."""
    g = Guidance(0.0, 0.0, gcfg.early_exit_frac, gcfg.double_obs_step)
    err = lambda pred: float(primary_error(m.pde, direction, pred, true_val).mean())  # noqa: E731
    cond = sample_split(m, "latent", fields_val, idx_val, direction, g, gcfg)
    uncond = sample_split(m, "latent", fields_val, idx_val, direction, g, gcfg, conditional=False)
    return {"conditional": err(cond), "unconditional": err(uncond),
            "zero": err(physical(m, torch.zeros_like(fields_val)))}


def variant_guidance(variant: str, chosen: dict, gcfg) -> Guidance:
    use_obs, use_pde, early = LATENT_VARIANTS[variant]
    return Guidance(chosen["zeta_obs"] if use_obs else 0.0, chosen["zeta_pde"] if use_pde else 0.0,
                    gcfg.early_exit_frac if early else 1.0, gcfg.double_obs_step)


# ----------------------------------------------------------------------------- the stage
def infer_stage(cfg, ctx) -> None:
    pde, gcfg = ctx.item["pde"], cfg.guidance
    torch.manual_seed(0)
    m = load_models(cfg, ctx, pde)
    data_dir = ctx.inputs["generate_pde_data"][pde]
    masks = load_masks(ctx.inputs["make_masks"][pde])
    fields = {s: normalised_fields(data_dir, s).to(m.device) for s in ("val", "test")}
    true = {s: np.stack(load_split(data_dir, s), axis=1) for s in ("val", "test")}
    idx = {s: mask_to_index(masks[s]).to(m.device) for s in ("val", "test")}
    n_hr = hr_res(m.n, cfg.data.sr_factor)

    chosen: dict = {}
    for sampler in ("latent", "pixel"):
        for direction in DIRECTIONS:
            chosen[f"{sampler}_{direction}"] = calibrate(m, sampler, fields["val"], idx["val"],
                                                         true["val"], direction, gcfg)
            ctx.progress(len(chosen), 4, f"calibrated {sampler} {direction}")
    write_json_atomic(ctx.out_dir / "guidance.json", chosen)
    premise = {d: prior_premise(m, fields["val"], idx["val"], true["val"], d, gcfg) for d in DIRECTIONS}
    write_json_atomic(ctx.out_dir / "premise.json", premise)

    preds: dict[str, np.ndarray] = {}
    runs: list[dict] = []
    n_test = len(true["test"])
    jobs = [("latent", v, d, s) for s in cfg.seeds for d in DIRECTIONS for v in gcfg.variants] + \
           [("pixel", v, d, s) for s in cfg.seeds for d in DIRECTIONS for v in PIXEL_VARIANTS]
    for j, (sampler, variant, direction, seed) in enumerate(jobs):
        g = variant_guidance(variant, chosen[f"{sampler}_{direction}"], gcfg)
        out, out_hr, obs_traj, seconds, steps_run = [], [], [], 0.0, 0
        for k, sl in enumerate(batched(n_test, gcfg.batch_size)):
            if sampler == "latent":
                f, traj, f_hr = run_latent(m, fields["test"][sl], idx["test"][sl], direction, g,
                                           gcfg.steps, 1000 * seed + k,
                                           hr=n_hr if variant == "full" else None)
                if f_hr is not None:
                    out_hr.append(physical(m, f_hr))
            else:
                f, traj = run_pixel(m, fields["test"][sl], idx["test"][sl], direction, g,
                                    gcfg.steps, 1000 * seed + k)
            out.append(physical(m, f))
            obs_traj.append(np.array(traj.obs_loss) * (sl.stop - sl.start))
            seconds += traj.seconds
            steps_run = traj.steps_run
        key = f"{sampler}-{variant}-{direction}-{seed}"
        preds[key] = np.concatenate(out)
        if out_hr:
            preds[key + "-hr"] = np.concatenate(out_hr)
        traj_mean = np.sum(obs_traj, axis=0) / n_test
        runs.append({"sampler": sampler, "variant": variant, "direction": direction, "seed": seed,
                     "zeta_obs": g.zeta_obs, "zeta_pde": g.zeta_pde, "steps_run": steps_run,
                     "sec_per_sample": seconds / n_test,
                     "obs_loss_first": float(traj_mean[0]), "obs_loss_last": float(traj_mean[-1]),
                     "obs_loss_trajectory": [float(v) for v in traj_mean]})
        ctx.progress(j + 1, len(jobs), key)
    with open(ctx.out_dir / "preds.npz", "wb") as fh:
        np.savez(fh, **{k: v.astype(np.float32) for k, v in preds.items()})
    timing = benchmark(m, fields["test"], idx["test"], chosen, cfg)
    e = cfg.evaluate
    timing["cost"] = compare_cost(cfg, m.schedule, e.cost_res, e.cost_down, e.timing_batch,
                                  e.cost_steps, e.timing_repeats, m.device)
    write_json_atomic(ctx.out_dir / "runs.json", runs)
    write_json_atomic(ctx.out_dir / "timing.json", timing)
    ctx.write_metrics({"n_runs": len(runs), **{f"zeta_{k}": [v["zeta_obs"], v["zeta_pde"]]
                                               for k, v in chosen.items()},
                       **{f"premise_{d}_{k}": v for d, p in premise.items() for k, v in p.items()},
                       "latent_sec_per_sample": timing["latent_sec_per_sample"],
                       "pixel_sec_per_sample": timing["pixel_sec_per_sample"],
                       **{f"cost_{k}": v for k, v in timing["cost"].items()}})


def benchmark(m: Models, fields_test, idx_test, chosen: dict, cfg) -> dict:
    """Wall time per sample of the full guided sampler, latent vs pixel, same steps, same batch,
    same direction (forward), alternating repeats; the median over repeats."""
    gcfg, b = cfg.guidance, cfg.evaluate.timing_batch
    f, i = fields_test[:b], idx_test[:b]
    times: dict[str, list[float]] = {"latent": [], "pixel": []}
    for r in range(cfg.evaluate.timing_repeats):
        for sampler in ("latent", "pixel"):
            # the same weights for both: timing must not depend on which zeta was calibrated
            g = Guidance(1.0, 1.0, gcfg.early_exit_frac, gcfg.double_obs_step)
            start = time.perf_counter()
            if sampler == "latent":
                run_latent(m, f, i, "forward", g, gcfg.steps, 77 + r)
            else:
                run_pixel(m, f, i, "forward", g, gcfg.steps, 77 + r)
            times[sampler].append((time.perf_counter() - start) / len(f))
    lat, pix = float(np.median(times["latent"])), float(np.median(times["pixel"]))
    return {"latent_sec_per_sample": lat, "pixel_sec_per_sample": pix, "ratio": lat / pix,
            "repeats": times, "batch": int(len(f)), "steps": gcfg.steps,
            "early_exit_frac": gcfg.early_exit_frac}
