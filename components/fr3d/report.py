"""report: the pass criteria of CLAIMS.md from the rollout_eval tables of every seed, the
premises, the full tables (oracle, ground-truth yardsticks and every baseline shown), and a plot
of AbsRel vs horizon per domain.

Every criterion is judged on the mean over seeds of per-seed means over sequences. Depth
criteria compare each forecaster with copy-last *through the same decoder on the same frames*
(ratio < 1: the forecast beats repeating the last frame), so a decoder's domain gap cancels.
P3  every forecaster converged: validation loss fell < 5 % over the last quarter of training.
F1  FR3D / copy-last AbsRel <= 0.95 at 1 s and 2 s in every domain (A-test, B, C).
F2  FR3D ATE@2 s <= 0.9 x no_share ATE@2 s on turning sequences (pooled over the 3 domains).
F3  in domain (A-test): FR3D's ratio < the 2D-feature forecaster's ratio at 1 s and 2 s.
F4  zero-shot (B and C): the same comparison at 1 s and 2 s.
F5  (diagnostic) stationary ego: FR3D's 2 s depth change, static < 0.5 x dynamic.
(P1, P2, the teacher premises, are measured by extract_tokens on the validation split.)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from components.common.io import read_json, read_table, write_bytes_atomic, write_json_atomic

DOMAINS = {"test": "A", "kitti_like": "B", "nuscenes_like": "C"}
H1, H2 = 5, 10                 # 1 s and 2 s at 5 fps
F1_RATIO = 0.95
F2_RATIO = 0.9
F5_RATIO = 0.5
P3_DROP = 0.05
# each forecaster's copy-last: the same decoder on the last context frame
COPY_LAST_OF = {"fr3d": "copy_last", "no_share": "copy_last", "scene_only": "copy_last",
                "feat2d": "feat2d_copy_last"}


def seed_means(scores: pd.DataFrame, metric: str, subset: pd.Series | None = None) -> pd.DataFrame:
    """Mean over sequences per (seed, split, method, horizon)."""
    df = scores if subset is None else scores[subset]
    return df.groupby(["seed", "split", "method", "horizon"])[metric].mean().reset_index()


def over_seeds(per_seed: pd.DataFrame, metric: str) -> pd.DataFrame:
    return per_seed.groupby(["split", "method", "horizon"])[metric].agg(["mean", "std"]).reset_index()


def value(table: pd.DataFrame, split: str, method: str, horizon: int) -> float:
    row = table[(table.split == split) & (table.method == method) & (table.horizon == horizon)]
    return float(row["mean"].iloc[0]) if len(row) else float("nan")


def copy_last_ratio(absrel: pd.DataFrame, split: str, method: str, horizon: int) -> float:
    return value(absrel, split, method, horizon) / value(absrel, split, COPY_LAST_OF[method], horizon)


def criteria(scores: pd.DataFrame, probe: pd.DataFrame, horizons: list[int]) -> dict:
    absrel = over_seeds(seed_means(scores, "absrel"), "absrel")
    out: dict = {"n_seeds": int(scores.seed.nunique())}
    judged = H1 in horizons and H2 in horizons
    for method in COPY_LAST_OF:
        for split, dom in DOMAINS.items():
            for h in (H1, H2):
                out[f"ratio_{method}_{dom}_h{h}"] = copy_last_ratio(absrel, split, method, h)
    ratio = lambda m, d, h: out.get(f"ratio_{m}_{d}_h{h}", float("nan"))  # noqa: E731
    out["F1_worst_ratio"] = max(ratio("fr3d", d, h) for d in DOMAINS.values() for h in (H1, H2))
    out["F1_pass"] = bool(out["F1_worst_ratio"] <= F1_RATIO) if judged else None
    # F3 / F4: margin = FR3D's ratio - the 2D forecaster's ratio, worst case (< 0 passes)
    margins = {d: max(ratio("fr3d", d, h) - ratio("feat2d", d, h) for h in (H1, H2))
               for d in DOMAINS.values()}
    out["F3_margin_A"] = margins["A"]
    out["F3_pass"] = bool(margins["A"] < 0) if judged else None
    out["F4_margin_BC"] = max(margins["B"], margins["C"])
    out["F4_pass"] = bool(out["F4_margin_BC"] < 0) if judged else None

    turning = scores[scores.turning & (scores.split.isin(DOMAINS))]
    ate = turning.groupby(["seed", "method", "horizon"])["ate"].mean().reset_index()
    ate = ate.groupby(["method", "horizon"])["ate"].mean()
    a_fr3d, a_sep = ate.get(("fr3d", H2), np.nan), ate.get(("no_share", H2), np.nan)
    out["F2_n_turning_sequences"] = int(turning[(turning.method == "fr3d") & (turning.horizon == H2)
                                                & (turning.seed == turning.seed.min())].shape[0])
    out["F2_ate2s_fr3d"], out["F2_ate2s_no_share"] = float(a_fr3d), float(a_sep)
    for method in ("const_vel", "oracle", "gt_const_vel"):
        out[f"F2_ate2s_{method}"] = float(ate.get((method, H2), np.nan))
    out["F2_ratio"] = float(a_fr3d / a_sep) if a_sep > 0 else float("nan")
    out["F2_pass"] = bool(out["F2_ratio"] <= F2_RATIO) if judged and np.isfinite(out["F2_ratio"]) else None

    if len(probe):
        p = probe[(probe.method == "fr3d") & (probe.horizon == max(horizons))]
        per_seed = p.groupby("seed")[["change_static", "change_dynamic"]].mean().mean()
        out["F5_change_static"] = float(per_seed["change_static"])
        out["F5_change_dynamic"] = float(per_seed["change_dynamic"])
        out["F5_pass"] = bool(per_seed["change_static"] < F5_RATIO * per_seed["change_dynamic"])
    # sanity (not a criterion): the oracle sees the future, so it should beat copy-last at t+1
    out["oracle_beats_copy_last_h1"] = {dom: bool(value(absrel, s, "oracle", 1) <= value(absrel, s, "copy_last", 1))
                                        for s, dom in DOMAINS.items()}
    return out


def convergence_premise(train_metrics: dict[str, dict]) -> dict:
    """P3 over every trained forecaster (FR3D and baselines): the worst last-quarter drop."""
    drops = {name: float(m["val_last_quarter_drop"]) for name, m in train_metrics.items()}
    worst = max(drops, key=drops.get)
    return {"P3_worst_last_quarter_drop": drops[worst], "P3_worst_model": worst,
            "P3_pass": bool(drops[worst] < P3_DROP)}


def _table(df: pd.DataFrame, metric: str, per_seed: pd.DataFrame) -> str:
    agg = over_seeds(per_seed, metric)
    agg["cell"] = [f"{m:.4f} ± {s:.4f}" if np.isfinite(s) else f"{m:.4f}" for m, s in zip(agg["mean"], agg["std"])]
    wide = agg.pivot_table(index=["split", "method"], columns="horizon", values="cell", aggfunc="first")
    wide.columns = [f"t+{h * 0.2:.1f}s" for h in wide.columns]
    wide = wide.reset_index()
    lines = ["| " + " | ".join(wide.columns) + " |", "|" + "---|" * len(wide.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in wide.itertuples(index=False)]
    return "\n".join(lines)


def _plot(scores: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    absrel = over_seeds(seed_means(scores, "absrel"), "absrel").dropna(subset=["mean"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (split, dom) in zip(axes, DOMAINS.items()):
        for method, g in absrel[absrel.split == split].groupby("method"):
            ax.errorbar(g.horizon * 0.2, g["mean"], yerr=g["std"].fillna(0), marker="o", label=method)
        ax.set(title=f"domain {dom} ({split})", xlabel="horizon (s)", ylabel="AbsRel")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def report_stage(cfg, ctx) -> None:
    ev = cfg.evaluate
    scores = pd.concat([read_table(p / "scores.parquet").to_pandas()
                        for p in ctx.inputs["rollout_eval"].values()], ignore_index=True)
    probe = pd.concat([read_table(p / "probe.parquet").to_pandas()
                       for p in ctx.inputs["rollout_eval"].values()], ignore_index=True)
    result = criteria(scores, probe, ev.horizons)
    train_metrics = {f"fr3d-{k}": read_json(p / "convergence.json")
                     for k, p in ctx.inputs["train_forecaster"].items()}
    train_metrics |= {k: read_json(p / "convergence.json")
                      for k, p in ctx.inputs["train_baselines"].items()}
    result |= convergence_premise(train_metrics)
    write_json_atomic(ctx.out_dir / "criteria.json", result)
    sections = ["# fr3d report", "## Pass criteria (mean over seeds)", "```",
                _json(result), "```"]
    for metric, subset, title in (
            ("absrel", None, "Depth AbsRel (median-scaled), all pixels"),
            ("delta1", None, "Depth delta1"),
            ("absrel_static", None, "AbsRel, static pixels"),
            ("absrel_dynamic", None, "AbsRel, dynamic pixels"),
            ("ate", None, "ATE (Sim(3)-aligned), all sequences"),
            ("ate", scores.turning, "ATE, turning sequences"),
            ("rpe_t", None, "RPE translation"), ("rpe_r", None, "RPE rotation (deg)"),
            ("jerk", None, "Trajectory jerk (informative)")):
        per_seed = seed_means(scores, metric, subset).dropna()
        sections += [f"## {title} (mean ± std over seeds)", _table(scores, metric, per_seed)]
    write_bytes_atomic(ctx.out_dir / "report.md", ("\n\n".join(sections) + "\n").encode())
    _plot(scores, ctx.out_dir / "absrel_vs_horizon.png")
    ctx.log_artifact(ctx.out_dir / "report.md")
    ctx.log_artifact(ctx.out_dir / "absrel_vs_horizon.png")
    flat = {k: (float(v) if not isinstance(v, bool) else float(v)) for k, v in result.items()
            if isinstance(v, (int, float, bool)) and v is not None and np.isfinite(float(v))}
    ctx.write_metrics({k: v for k, v in flat.items() if np.isfinite(v)})


def _json(obj) -> str:
    import json

    return json.dumps(obj, indent=2, default=float)
