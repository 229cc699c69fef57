"""Stage report: pass criteria of CLAIMS.md over the eval seeds, the side-by-side table."""
from __future__ import annotations

import numpy as np
import pandas as pd

from components.common.io import read_table, write_bytes_atomic, write_json_atomic
from components.common.metrics import paired_difference, summarize

P1_ACC_MARGIN = 0.10      # class-accuracy points at the return pose
P1_PSNR_MARGIN = 2.0      # dB at the return pose


def criteria(df: pd.DataFrame, spin: int, horizon: int) -> dict:
    """P1-P4 from per-seed metric rows (variant, set, metric, value, seed)."""
    def per_seed(variant, set_name, metric):
        sub = df[(df.variant == variant) & (df.set == set_name) & (df.metric == metric)]
        return sub.sort_values("seed")["value"].to_numpy()

    out: dict = {}
    acc_p, acc_b = per_seed("persist", "lookaround", f"acc_gt_t{spin}"), per_seed("baseline", "lookaround", f"acc_gt_t{spin}")
    ps_p, ps_b = per_seed("persist", "lookaround", f"psnr_gt_t{spin}"), per_seed("baseline", "lookaround", f"psnr_gt_t{spin}")
    if len(acc_p) and len(acc_b):
        d_acc, d_psnr = paired_difference(acc_p, acc_b), paired_difference(ps_p, ps_b)
        out.update({"P1_acc_persist": float(acc_p.mean()), "P1_acc_baseline": float(acc_b.mean()),
                    "P1_acc_diff": d_acc["mean"], "P1_acc_diff_ci_low": d_acc["ci_low"],
                    "P1_psnr_persist": float(ps_p.mean()), "P1_psnr_baseline": float(ps_b.mean()),
                    "P1_psnr_diff": d_psnr["mean"],
                    "P1_pass": float(d_acc["mean"] >= P1_ACC_MARGIN and d_psnr["mean"] >= P1_PSNR_MARGIN)})
    we_p, we_b = per_seed("persist", "free", "warp_l1"), per_seed("baseline", "free", "warp_l1")
    if len(we_p) and len(we_b):
        out.update({"P2_warp_persist": float(we_p.mean()), "P2_warp_baseline": float(we_b.mean()),
                    "P2_pass": float(we_p.mean() <= we_b.mean())})
    h_p, h_b = per_seed("persist", "free", f"acc_h{horizon}"), per_seed("baseline", "free", f"acc_h{horizon}")
    if len(h_p) and len(h_b):
        out.update({"P3_acc_persist": float(h_p.mean()), "P3_acc_baseline": float(h_b.mean()),
                    "P3_pass": float(h_p.mean() >= h_b.mean())})
        w0 = per_seed("persist_w0", "free", f"acc_h{horizon}")
        if len(w0):
            out["P3_acc_persist_w0"] = float(w0.mean())
    iou = per_seed("persist", "edit", "iou")
    if len(iou):
        out.update({"P4_edit_iou": float(np.nanmean(iou)), "P4_pass": float(np.nanmean(iou) >= 0.5)})
    iou0 = per_seed("persist_w0", "edit", "iou")
    if len(iou0):
        out["P4_edit_iou_w0"] = float(np.nanmean(iou0))
    return out


def side_by_side(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby(["set", "metric", "variant"])["value"]
    table = g.mean().unstack("variant")
    std = g.std().unstack("variant").add_suffix("_std")
    return table.join(std).reset_index()


def _fmt(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines)


def report_stage(cfg, ctx) -> None:
    from components.persist.data import spin_steps

    ev = cfg.evaluate
    spin = spin_steps(cfg.world)
    frames = []
    for key, path in ctx.inputs["rollout_eval"].items():
        d = read_table(path / "metrics.parquet").to_pandas()
        d["seed"] = int(key)
        frames.append(d)
    df = pd.concat(frames, ignore_index=True)
    horizon = 64 if 64 in ev.horizons else max(ev.horizons)
    result = criteria(df, spin, horizon)
    result["n_seeds"] = len(frames)
    result["P3_horizon"] = horizon
    table = side_by_side(df)
    write_json_atomic(ctx.out_dir / "criteria.json", result)
    write_table_csv = table.to_csv(index=False)
    write_bytes_atomic(ctx.out_dir / "table.csv", write_table_csv.encode())
    text = ["# persist report", "## Criteria (means over seeds)", "```",
            "\n".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}" for k, v in result.items()),
            "```", "## All metrics, every variant side by side (mean and std over seeds)", _fmt(table)]
    write_bytes_atomic(ctx.out_dir / "report.md", ("\n\n".join(text) + "\n").encode())
    ctx.log_artifact(ctx.out_dir / "report.md")
    summ = {f"{m}_{v}": summarize(df[(df.metric == m) & (df.variant == v) & (df.set == s)]["value"])["mean"]
            for s, m, v in {(r.set, r.metric, r.variant) for r in df.itertuples()}
            if s == "uniform" and m == f"acc_gt_t{spin}"}
    result.update({f"control_uniform_{k}": v for k, v in summ.items()})
    ctx.write_metrics(result)
