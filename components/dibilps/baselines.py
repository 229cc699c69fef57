"""Stage baselines: classical interpolate-then-solve / interpolate-then-differentiate and a
masked-input regressor, on the same fixed test masks. (The pixel-space diffusion baseline is
trained in train_pixel_diffusion and sampled in infer with the same guided sampler.)"""
from __future__ import annotations

import time

import numpy as np
import torch
from scipy.interpolate import RBFInterpolator

from components.common.io import write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit
from components.dibilps.data import load_masks, load_normaliser, load_split, n_observed
from components.dibilps.infer import OBSERVED_CHANNEL, TARGET_CHANNEL, darcy_error_rate, rel_l2
from components.dibilps.models import MaskedRegressor
from components.dibilps.pde import DARCY_HIGH, DARCY_LOW, Solver, neg_div_flux
from components.dibilps.train import normalised_fields, random_batches, random_point_index, stage_device


def grid_points(n: int) -> np.ndarray:
    x = np.linspace(0.0, 1.0, n)
    gx, gy = np.meshgrid(x, x, indexing="ij")
    return np.stack([gx.ravel(), gy.ravel()], axis=1)


def rbf_fill(values: np.ndarray, mask: np.ndarray, kernel: str, zero_boundary: bool = False) -> np.ndarray:
    """Interpolate the observed nodes of ``values`` (n, n) over the grid; with ``zero_boundary``
    the (known) Dirichlet nodes u = 0 are added as observations."""
    n = values.shape[0]
    pts = grid_points(n)
    known = mask.ravel().copy()
    vals = values.ravel().copy()
    if zero_boundary:
        border = np.zeros((n, n), dtype=bool)
        border[0, :] = border[-1, :] = border[:, 0] = border[:, -1] = True
        known |= border.ravel()
        vals[border.ravel()] = 0.0
    rbf = RBFInterpolator(pts[known], vals[known], kernel=kernel)
    return rbf(pts).reshape(n, n)


def _edge_fill(interior: np.ndarray) -> np.ndarray:
    return np.pad(interior, 1, mode="edge")


def differentiate(pde: str, u: np.ndarray, helmholtz_k: float = 1.0) -> np.ndarray:
    """Recover ``a`` from a (smooth) ``u`` with the same 5-point stencil as the solver.
    Darcy treats ``a`` as locally constant: ``-a lap u = 1`` -> ``a = 1 / (-lap u)``, clipped."""
    ut = torch.from_numpy(u)[None].double()
    lap = -neg_div_flux(ut, torch.ones_like(ut))[0].numpy()
    if pde == "poisson":
        a = lap
    elif pde == "helmholtz":
        a = lap + helmholtz_k**2 * u[1:-1, 1:-1]
    else:
        with np.errstate(divide="ignore"):
            a = np.where(-lap > 0, 1.0 / np.maximum(-lap, 1e-12), DARCY_HIGH)
        a = np.clip(a, DARCY_LOW, DARCY_HIGH)
    return _edge_fill(a)


def interpolate_then_solve(pde, a_true, masks, kernel, helmholtz_k) -> np.ndarray:
    solver = Solver(pde, a_true.shape[-1], helmholtz_k)
    out = []
    for a, mk in zip(a_true, masks):
        a_hat = rbf_fill(a, mk, kernel)
        if pde == "darcy":
            a_hat = np.where(a_hat >= (DARCY_HIGH + DARCY_LOW) / 2, DARCY_HIGH, DARCY_LOW)
        out.append(np.stack([solver.solve(a_hat), a_hat]))
    return np.stack(out)


def interpolate_then_differentiate(pde, u_true, masks, kernel, helmholtz_k) -> np.ndarray:
    out = []
    for u, mk in zip(u_true, masks):
        u_hat = rbf_fill(u, mk, kernel, zero_boundary=True)
        out.append(np.stack([u_hat, differentiate(pde, u_hat, helmholtz_k)]))
    return np.stack(out)


def train_regressor(x: torch.Tensor, direction: str, k: int, b, ctx) -> MaskedRegressor:
    seed_everything(b.seed + (0 if direction == "forward" else 1))
    n = x.shape[-1]
    src, dst = OBSERVED_CHANNEL[direction], TARGET_CHANNEL[direction]
    model = MaskedRegressor(b.regressor_width).to(x.device)

    def loss_fn(m, idx):
        batch = x[idx]
        pts = random_point_index(len(idx), n, k)
        mask = torch.zeros(len(idx), n * n, dtype=torch.bool).scatter_(1, pts, True).view(-1, n, n)
        mask = mask.to(x.device)
        sparse = torch.where(mask, batch[:, src], torch.zeros((), device=x.device))
        return ((m(sparse, mask) - batch[:, dst]) ** 2).mean()

    fit(model, random_batches(len(x), b.regressor_batch_size), loss_fn, steps=b.regressor_steps, lr=b.regressor_lr,
        warmup=min(50, b.regressor_steps // 10), ctx=ctx, log_every=25, prefix=f"regressor_{direction}")
    return model.eval()


def tps_input_error(pde: str, a: np.ndarray, masks: np.ndarray, kernel: str) -> float:
    """How well thin-plate interpolation alone recovers the forward input ``a`` from the masks
    (rel-L2; Darcy: error rate after thresholding). The premise: not already accurate."""
    filled = np.stack([rbf_fill(x, mk, kernel) for x, mk in zip(a, masks)])
    if pde == "darcy":
        return float(darcy_error_rate(filled, a).mean())
    return float(rel_l2(filled, a).mean())


def baselines_stage(cfg, ctx) -> None:
    pde, b = ctx.item["pde"], cfg.baselines
    data_dir = ctx.inputs["generate_pde_data"][pde]
    all_masks = load_masks(ctx.inputs["make_masks"][pde])
    masks = all_masks["test"]
    u_val, a_val = load_split(data_dir, "val")
    val_tps = tps_input_error(pde, a_val.astype(np.float64), all_masks["val"], b.rbf_kernel)
    val_fwd = interpolate_then_solve(pde, a_val.astype(np.float64), all_masks["val"], b.rbf_kernel,
                                     cfg.data.helmholtz_k)
    val_fwd_err = float(rel_l2(val_fwd[:, 0], u_val.astype(np.float64)).mean())
    u, a = load_split(data_dir, "test")
    u, a = u.astype(np.float64), a.astype(np.float64)
    norm = load_normaliser(data_dir)
    preds, seconds = {}, {}

    start = time.perf_counter()
    preds["interp_solve-forward"] = interpolate_then_solve(pde, a, masks, b.rbf_kernel, cfg.data.helmholtz_k)
    seconds["interp_solve-forward"] = (time.perf_counter() - start) / len(u)
    start = time.perf_counter()
    preds["interp_diff-inverse"] = interpolate_then_differentiate(pde, u, masks, b.rbf_kernel,
                                                                 cfg.data.helmholtz_k)
    seconds["interp_diff-inverse"] = (time.perf_counter() - start) / len(u)

    device = stage_device(cfg)
    x = normalised_fields(data_dir, "train").to(device)
    test = normalised_fields(data_dir, "test").to(device)
    k = n_observed(x.shape[-1], cfg.masks.obs_fraction)
    mask_t = torch.from_numpy(masks).to(device)
    for direction, other in (("forward", "interp_solve-forward"), ("inverse", "interp_diff-inverse")):
        model = train_regressor(x, direction, k, b, ctx)
        src, dst = OBSERVED_CHANNEL[direction], TARGET_CHANNEL[direction]
        start = time.perf_counter()
        with torch.no_grad():
            out = model(torch.where(mask_t, test[:, src], torch.zeros((), device=device)), mask_t).cpu()
        seconds[f"regressor-{direction}"] = (time.perf_counter() - start) / len(u)
        pred = preds[other].copy()           # the observed field: the same interpolant as above
        target_phys = norm.decode(out, out)[0] if dst == 0 else norm.decode(out, out)[1]
        pred[:, dst] = target_phys.numpy()
        preds[f"regressor-{direction}"] = pred
    with open(ctx.out_dir / "preds.npz", "wb") as fh:
        np.savez(fh, **{kk: v.astype(np.float32) for kk, v in preds.items()})
    write_json_atomic(ctx.out_dir / "timing.json", seconds)
    write_json_atomic(ctx.out_dir / "premise.json", {"val_tps_input_error": val_tps,
                                                     "val_interp_solve_error": val_fwd_err})
    ctx.write_metrics({f"sec_per_sample_{kk}": v for kk, v in seconds.items()}
                      | {"val_tps_input_error": val_tps, "val_interp_solve_error": val_fwd_err})
