"""Stage report: pass criteria of CLAIMS.md over the eval seeds, the side-by-side table."""
from __future__ import annotations

import numpy as np
import pandas as pd

from components.common.io import read_table, write_bytes_atomic, write_json_atomic
from components.common.metrics import paired_difference, summarize

C1_PROBE_MARGIN = 0.15     # probe-colour score points, PERSIST over the pixel-history baseline
P1_ORACLE_MIN = 0.80       # premise: the true-state row reads the probe colour this well (v2, v4; v3's 0.60 withdrawn)
P2_CONTEXT_MAX = 0         # premise: probe pixels in the baseline's window at the first scored frame


def criteria(df: pd.DataFrame, spin: int, horizon: int) -> dict:
    """Premises P1-P2 and claims C1-C4 from per-seed metric rows (variant, set, metric, value,
    seed). Premises read the validation probe set only; claims the held-out test sets."""
    def per_seed(variant, set_name, metric):
        sub = df[(df.variant == variant) & (df.set == set_name) & (df.metric == metric)]
        return sub.sort_values("seed")["value"].to_numpy()

    out: dict = {}
    oracle = per_seed("oracle", "val_probe", "probe_score")
    if len(oracle):
        out.update({"P1_oracle_val_probe_score": float(oracle.mean()),
                    "P1_ceiling_val_probe_score": float(per_seed("ground_truth", "val_probe", "probe_score").mean())})
        state = per_seed("oracle", "val_probe", "state_probe_score")
        if len(state):
            out["P1_oracle_val_state_probe_score"] = float(state.mean())
    ctx_px = per_seed("ground_truth", "val_probe", "probe_context_pixels_max")
    if len(ctx_px):
        out.update({"P2_val_context_probe_pixels_max": float(ctx_px.max()),
                    "P2_val_probe_gap_min": float(per_seed("ground_truth", "val_probe", "probe_gap_min").min()),
                    "P2_val_probe_found_frac": float(per_seed("ground_truth", "val_probe", "probe_found_frac").min())})
    sc_p, sc_b = per_seed("persist", "probe", "probe_score"), per_seed("baseline", "probe", "probe_score")
    if len(sc_p) and len(sc_b):
        d = paired_difference(sc_p, sc_b)
        out.update({"C1_probe_persist": float(sc_p.mean()), "C1_probe_baseline": float(sc_b.mean()),
                    "C1_probe_diff": d["mean"], "C1_probe_diff_ci_low": d["ci_low"],
                    "C1_pass": float(d["mean"] >= C1_PROBE_MARGIN)})
        for v in ("persist_w0", "oracle", "copy_first"):
            x = per_seed(v, "probe", "probe_score")
            if len(x):
                out[f"C1_probe_{v}"] = float(x.mean())
        for v in ("persist", "persist_w0"):        # the probe colour in the world state W kept
            x = per_seed(v, "probe", "state_probe_score")
            if len(x):
                out[f"C1_state_probe_{v}"] = float(x.mean())
    we_p, we_b = per_seed("persist", "free", "warp_l1"), per_seed("baseline", "free", "warp_l1")
    if len(we_p) and len(we_b):
        out.update({"C2_warp_persist": float(we_p.mean()), "C2_warp_baseline": float(we_b.mean()),
                    "C2_warp_diff": float(we_p.mean() - we_b.mean()),
                    "C2_pass": float(we_p.mean() <= we_b.mean())})
    h_p, h_b = per_seed("persist", "free", f"acc_h{horizon}"), per_seed("baseline", "free", f"acc_h{horizon}")
    if len(h_p) and len(h_b):
        out.update({"C3_acc_persist": float(h_p.mean()), "C3_acc_baseline": float(h_b.mean()),
                    "C3_acc_diff": float(h_p.mean() - h_b.mean()),
                    "C3_pass": float(h_p.mean() >= h_b.mean())})
        for v in ("persist_w0", "oracle", "copy_first"):
            x = per_seed(v, "free", f"acc_h{horizon}")
            if len(x):
                out[f"C3_acc_{v}"] = float(x.mean())
    iou = per_seed("persist", "edit", "iou")
    if len(iou):
        out.update({"C4_edit_iou": float(np.nanmean(iou)), "C4_pass": float(np.nanmean(iou) >= 0.5)})
    iou0 = per_seed("persist_w0", "edit", "iou")
    if len(iou0):
        out["C4_edit_iou_w0"] = float(np.nanmean(iou0))
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
        d["seed"] = int(str(key).rsplit("-", 1)[-1])     # v6 items are "{part}-{seed}"
        frames.append(d)
    df = pd.concat(frames, ignore_index=True)
    n_seeds = int(df.seed.nunique())
    horizon = 64 if 64 in ev.horizons else max(ev.horizons)
    result = criteria(df, spin, horizon)
    result["n_seeds"] = n_seeds
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
