"""Stage report: the premise checks and pass criteria of CLAIMS.md, a results table and plots.

Premises (validation only): P1 the unguided conditional prior beats predicting zero, P2 it beats
the unconditional prior, P3 thin-plate interpolation of the forward input is not already
accurate, P4 the chosen observation weight is interior to its grid.
C1  full error <= 0.8 x no_guidance error, every PDE and direction (mean over seeds)
C2  full mean PDE residual <= 0.9 x no_pde mean PDE residual, every PDE and direction
C3  counted MACs per guided step, latent <= 0.5 x pixel (equal denoiser width, 64^2 -> 8^2)
C4  2x super-resolution error of the full variant <= 1.5 x its in-resolution error, every cell
Ungated: the classical and regressor baselines against the full variant; wall times.
"""
from __future__ import annotations

import io

import numpy as np
import pandas as pd

from components.common.io import read_json, read_table, write_bytes_atomic, write_json_atomic

C1_RATIO, C2_RATIO, C3_RATIO, C4_RATIO = 0.8, 0.9, 0.5, 1.5


def _mean(df: pd.DataFrame, variant: str, col: str, method: str = "latent_diffusion") -> float:
    rows = df[(df.method == method) & (df.variant == variant)]
    return float(rows[col].mean()) if len(rows) else float("nan")


def criteria(table: pd.DataFrame, timing: dict[str, dict]) -> dict:
    out: dict = {"cells": {}}
    c1, c2, c4 = [], [], []
    for (pde, direction), df in table[table.method == "latent_diffusion"].groupby(["pde", "direction"]):
        cell = f"{pde}_{direction}"
        full, unguided = _mean(df, "full", "error"), _mean(df, "no_guidance", "error")
        res_full, res_nopde = _mean(df, "full", "residual"), _mean(df, "no_pde", "residual")
        sr, inres = _mean(df, "full", "sr_error"), full
        base = table[(table.pde == pde) & (table.direction == direction) & (table.seed == -1)]
        pix = _mean(table[(table.pde == pde) & (table.direction == direction)], "full", "error",
                    "pixel_diffusion")
        rec = {"error_full": full, "error_no_guidance": unguided, "c1_ratio": full / unguided,
               "residual_full": res_full, "residual_no_pde": res_nopde,
               "sr_error": sr, "inres_error": inres, "c4_ratio": sr / inres,
               "sr_error_bilinear": _mean(df, "full", "sr_error_bilinear"),
               "error_pixel_full": pix,
               "baselines": {m: float(e) for m, e in zip(base.method, base.error)}}
        for v in ("no_pde", "no_obs", "no_early_exit"):
            rec[f"error_{v}"] = _mean(df, v, "error")
        c1.append(rec["c1_ratio"] <= C1_RATIO)
        rec["c2_ratio"] = res_full / res_nopde
        c2.append(rec["c2_ratio"] <= C2_RATIO)
        c4.append(rec["c4_ratio"] <= C4_RATIO)
        out["cells"][cell] = rec
    c3 = []
    for pde, t in timing.items():
        cell = out["cells"].setdefault(f"{pde}_timing", {})
        cell["c3_ratio"] = t["cost"]["macs_ratio"]
        cell["wall_ratio_cost_res"] = t["cost"]["sec_ratio"]
        cell["wall_ratio_trained"] = t["ratio"]
        c3.append(cell["c3_ratio"] <= C3_RATIO)
    for name, hits in (("c1", c1), ("c2", c2), ("c3", c3), ("c4", c4)):
        out[f"{name}_cells_passing"] = int(sum(hits))
        out[f"{name}_cells"] = len(hits)
        out[f"{name}_pass"] = float(bool(hits) and all(hits))
    return out


def _flat_metrics(crit: dict) -> dict:
    flat = {k: v for k, v in crit.items() if k != "cells"}
    for cell, rec in crit["cells"].items():
        for k, v in rec.items():
            if isinstance(v, float):
                flat[f"{cell}_{k}"] = v
        for m, e in rec.get("baselines", {}).items():
            flat[f"{cell}_baseline_{m}"] = e
    ratios = [r["c1_ratio"] for r in crit["cells"].values() if "c1_ratio" in r]
    flat["c1_worst_ratio"] = float(max(ratios)) if ratios else float("nan")
    c3 = [r["c3_ratio"] for r in crit["cells"].values() if "c3_ratio" in r]
    flat["c3_worst_ratio"] = float(max(c3)) if c3 else float("nan")
    c4 = [r["c4_ratio"] for r in crit["cells"].values() if "c4_ratio" in r]
    flat["c4_worst_ratio"] = float(max(c4)) if c4 else float("nan")
    c2 = [r["c2_ratio"] for r in crit["cells"].values() if "c2_ratio" in r]
    flat["c2_worst_ratio"] = float(max(c2)) if c2 else float("nan")
    return flat


def premises(premise: dict[str, dict], base_premise: dict[str, dict],
             guidance: dict[str, dict]) -> dict:
    """Worst case over PDE x direction cells of the validation premise quantities."""
    out: dict = {}
    for pde, p in premise.items():
        for d, v in p.items():
            out[f"{pde}_{d}_prior_vs_zero"] = v["conditional"] / v["zero"]
            out[f"{pde}_{d}_prior_vs_unconditional"] = v["conditional"] / v["unconditional"]
        out[f"{pde}_val_tps_input_error"] = base_premise[pde]["val_tps_input_error"]
        out[f"{pde}_val_interp_solve_error"] = base_premise[pde]["val_interp_solve_error"]
    cells = [(pde, d) for pde in premise for d in premise[pde]]
    out["p1_worst_prior_vs_zero"] = max(out[f"{p}_{d}_prior_vs_zero"] for p, d in cells)
    out["p2_worst_prior_vs_unconditional"] = max(out[f"{p}_{d}_prior_vs_unconditional"] for p, d in cells)
    out["p3_min_tps_input_error"] = min(base_premise[p]["val_tps_input_error"] for p in premise)
    interior = [guidance[p][f"latent_{d}"]["zeta_obs_interior"] for p, d in cells]
    out["p4_zeta_obs_interior_share"] = float(np.mean(interior))
    out["zeta_pde_interior_share"] = float(np.mean(
        [guidance[p][f"latent_{d}"]["zeta_pde_interior"] for p, d in cells]))
    return out


def _plots(table: pd.DataFrame, runs: dict[str, list], out_dir) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    diff = table[table.method.isin(["latent_diffusion", "pixel_diffusion"])]
    cells = sorted(set(zip(diff.pde, diff.direction)))
    fig, axes = plt.subplots(1, max(1, len(cells)), figsize=(4 * max(1, len(cells)), 3.2), squeeze=False)
    for ax, (pde, direction) in zip(axes[0], cells):
        df = table[(table.pde == pde) & (table.direction == direction)]
        g = df.assign(label=df.method.str.replace("_diffusion", "") + ":" + df.variant) \
              .groupby("label")["error"].agg(["mean", "std"]).sort_values("mean")
        ax.barh(g.index, g["mean"], xerr=g["std"].fillna(0))
        ax.set_title(f"{pde} {direction}", fontsize=9)
        ax.set_xlabel("error (rel-L2 / Darcy-a error rate)", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    paths.append(_save(fig, out_dir / "errors.png"))
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for pde, rs in runs.items():
        for r in rs:
            if r["sampler"] == "latent" and r["seed"] == rs[0]["seed"] and r["variant"] in ("full", "no_guidance"):
                ax.plot(r["obs_loss_trajectory"], label=f"{pde} {r['direction']} {r['variant']}")
    ax.set_xlabel("DDIM step"); ax.set_ylabel("L_obs of z0_hat"); ax.set_yscale("log")
    ax.legend(fontsize=6)
    fig.tight_layout()
    paths.append(_save(fig, out_dir / "obs_loss_trajectory.png"))
    return paths


def _save(fig, path):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    write_bytes_atomic(path, buf.getvalue())
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def report_stage(cfg, ctx) -> None:
    table = read_table(ctx.inputs["evaluate"] / "metrics.parquet").to_pandas()
    pdes = sorted(table.pde.unique())
    timing = {p: read_json(ctx.inputs["infer"][p] / "timing.json") for p in pdes}
    runs = {p: read_json(ctx.inputs["infer"][p] / "runs.json") for p in pdes}
    guidance = {p: read_json(ctx.inputs["infer"][p] / "guidance.json") for p in pdes}
    prem = premises({p: read_json(ctx.inputs["infer"][p] / "premise.json") for p in pdes},
                    {p: read_json(ctx.inputs["baselines"][p] / "premise.json") for p in pdes}, guidance)
    crit = criteria(table, timing)
    crit["premise"] = prem
    crit["guidance"] = guidance
    crit["timing"] = timing
    write_json_atomic(ctx.out_dir / "criteria.json", crit)
    summary = (table.groupby(["pde", "direction", "method", "variant"])
               [["error", "residual", "sec_per_sample", "sr_error"]].agg(["mean", "std"]))
    lines = ["# dibilps results", "", summary.to_string(), "",
             f"C1 pass {crit['c1_pass']}  C2 pass {crit['c2_pass']}  C3 pass {crit['c3_pass']}  "
             f"C4 pass {crit['c4_pass']}"]
    write_bytes_atomic(ctx.out_dir / "report.md", "\n".join(lines).encode())
    for path in _plots(table, runs, ctx.out_dir):
        ctx.log_artifact(path)
    ctx.log_artifact(ctx.out_dir / "report.md")
    ctx.write_metrics({k: (float(v) if isinstance(v, (int, float, np.floating)) else v)
                       for k, v in (_flat_metrics(crit) | prem).items()})
