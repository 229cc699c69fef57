"""Stage evaluate: one row per (pde, method, variant, direction, seed) with relative L2 / error
rate, PDE residual, wall time per sample, and super-resolution error for the full variant.

Scoring follows the official code: observed nodes of the observed field are overwritten with
the truth before errors are computed (for every method alike). The PDE residual is measured
on the raw prediction (what the solver produced), in physical units, ``||R||_2 / n^2``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from components.common.io import read_json, write_table
from components.dibilps.data import load_masks, load_split
from components.dibilps.infer import darcy_error_rate, paste_observations, primary_error, rel_l2
from components.dibilps.pde import residual_norm


def load_preds(folder) -> dict[str, np.ndarray]:
    with np.load(folder / "preds.npz") as z:
        return {k: z[k] for k in z.files}


def field_metrics(pde: str, direction: str, pred: np.ndarray, true: np.ndarray, masks: np.ndarray,
                  helmholtz_k: float) -> dict:
    scored = paste_observations(pred, true, masks, direction)
    res = residual_norm(pde, torch.from_numpy(pred[:, 0]).double(), torch.from_numpy(pred[:, 1]).double(),
                        helmholtz_k).numpy()
    out = {"error": float(primary_error(pde, direction, scored, true).mean()),
           "rel_l2_u": float(rel_l2(scored[:, 0], true[:, 0]).mean()),
           "rel_l2_a": float(rel_l2(scored[:, 1], true[:, 1]).mean()),
           "residual": float(np.mean(res))}
    if pde == "darcy":
        out["error_rate_a"] = float(darcy_error_rate(scored[:, 1], true[:, 1]).mean())
    return out


def upsample(pred: np.ndarray, n_hr: int) -> np.ndarray:
    """Bilinear interpolation on the nested node grid (a reference for the decoder's SR)."""
    t = torch.from_numpy(pred)
    return F.interpolate(t, size=(n_hr, n_hr), mode="bilinear", align_corners=True).numpy()


def evaluate_stage(cfg, ctx) -> None:
    rows = []
    for pde in cfg.data.pdes:
        data_dir = ctx.inputs["generate_pde_data"][pde]
        true = np.stack(load_split(data_dir, "test"), axis=1).astype(np.float64)
        true_hr = np.stack(load_split(data_dir, "test_hr"), axis=1).astype(np.float64)
        masks = load_masks(ctx.inputs["make_masks"][pde])["test"]
        infer_dir = ctx.inputs["infer"][pde]
        runs = {(r["sampler"], r["variant"], r["direction"], r["seed"]): r
                for r in read_json(infer_dir / "runs.json")}
        preds = load_preds(infer_dir)
        for (sampler, variant, direction, seed), run in runs.items():
            key = f"{sampler}-{variant}-{direction}-{seed}"
            pred = preds[key].astype(np.float64)
            row = {"pde": pde, "method": f"{sampler}_diffusion", "variant": variant,
                   "direction": direction, "seed": seed, "sec_per_sample": run["sec_per_sample"],
                   "zeta_obs": run["zeta_obs"], "zeta_pde": run["zeta_pde"],
                   "obs_loss_first": run["obs_loss_first"], "obs_loss_last": run["obs_loss_last"],
                   **field_metrics(pde, direction, pred, true, masks, cfg.data.helmholtz_k)}
            if key + "-hr" in preds:
                hr = preds[key + "-hr"].astype(np.float64)
                row["sr_error"] = float(primary_error(pde, direction, hr, true_hr).mean())
                row["sr_error_bilinear"] = float(primary_error(
                    pde, direction, upsample(pred, true_hr.shape[-1]), true_hr).mean())
            rows.append(row)
        base_dir = ctx.inputs["baselines"][pde]
        base_time = read_json(base_dir / "timing.json")
        for key, pred in load_preds(base_dir).items():
            method, direction = key.split("-")
            rows.append({"pde": pde, "method": method, "variant": "-", "direction": direction,
                         "seed": -1, "sec_per_sample": base_time[key],
                         **field_metrics(pde, direction, pred.astype(np.float64), true, masks,
                                         cfg.data.helmholtz_k)})
        # how far the data solver's own 2x refinement moves the answer (discretisation floor)
        rows.append({"pde": pde, "method": "solver_refinement", "variant": "-",
                     "direction": "forward", "seed": -1,
                     "sr_error": float(primary_error(pde, "forward", upsample(true, true_hr.shape[-1]),
                                                     true_hr).mean())})
    table = pd.DataFrame(rows)
    write_table(ctx.out_dir / "metrics.parquet", table)
    table.to_csv(ctx.out_dir / "metrics.csv", index=False)
    summary = table[table.method == "latent_diffusion"].groupby(["pde", "direction", "variant"])["error"].mean()
    ctx.write_metrics({f"{p}_{d}_{v}_error": float(e) for (p, d, v), e in summary.items()})
