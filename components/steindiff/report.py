"""report: the pass criteria of CLAIMS.md, the full table (control rows included) and plots."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from components.common.io import read_json, read_table, write_bytes_atomic, write_json_atomic

C1_STEPS = (3, 4, 5)      # Heun budgets where vanilla degrades
C1_RATIO = 0.6
C3_STEPS = (3, 4)
C2_MIN_MODES = 6      # of 8: the corrected sampler must not collapse the mixture


def paired_table(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Mean over seeds per (dataset, solver, steps) with vanilla and stein side by side."""
    runs = df[df["solver"] != "true_samples"]
    mean = runs.pivot_table(index=["dataset", "solver", "steps", "nfe"], columns="correction",
                            values=metric, aggfunc="mean")
    std = runs.pivot_table(index=["dataset", "solver", "steps", "nfe"], columns="correction",
                           values=metric, aggfunc="std")
    out = mean.add_prefix(f"{metric}_").join(std.add_prefix(f"{metric}_std_"))
    if {"none", "stein"} <= set(mean.columns):
        out[f"{metric}_ratio"] = mean["stein"] / mean["none"]
    return out.reset_index()


def _lookup(table: pd.DataFrame, dataset: str, solver: str, steps: int, column: str) -> float:
    row = table[(table.dataset == dataset) & (table.solver == solver) & (table.steps == steps)]
    return float(row[column].iloc[0]) if len(row) and column in row else float("nan")


def criteria(df: pd.DataFrame) -> dict:
    """C1-C3 of CLAIMS.md. A criterion whose budgets were not all run (e.g. smoke) is None."""
    sw = paired_table(df[df.dataset == "mixture"], "sw2")
    cov = paired_table(df[df.dataset == "mixture"], "modes_covered")
    fd = paired_table(df[df.dataset == "digits"], "fd")
    c1 = _present({n: _lookup(sw, "mixture", "heun", n, "sw2_ratio") for n in C1_STEPS})
    c2 = _present({n: _lookup(cov, "mixture", "heun", n, "modes_covered_stein") for n in C1_STEPS})
    c3 = {n: (_lookup(fd, "digits", "heun", n, "fd_stein"), _lookup(fd, "digits", "heun", n, "fd_none"))
          for n in C3_STEPS}
    c3 = {n: list(p) for n, p in c3.items() if all(np.isfinite(p))}
    complete = lambda d, steps: len(d) == len(steps)  # noqa: E731
    c1_hits = sum(r <= C1_RATIO for r in c1.values())
    return {
        "C1_sw2_ratio": c1,
        "C1_budgets_passing": c1_hits,
        "C1_pass": bool(c1_hits >= 2) if complete(c1, C1_STEPS) else None,
        "C2_modes_covered_stein": c2,
        "C2_pass": bool(all(m >= C2_MIN_MODES for m in c2.values())) if complete(c2, C1_STEPS) else None,
        "C3_fd_stein_vs_none": c3,
        "C3_pass": bool(all(a < b for a, b in c3.values())) if complete(c3, C3_STEPS) else None,
    }


def _present(values: dict[int, float]) -> dict[str, float]:
    return {str(n): v for n, v in values.items() if np.isfinite(v)}


def _fmt_table(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines)


def _plot(df: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = df[df.solver != "true_samples"]
    panels = [("mixture", "sw2"), ("digits", "fd")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (dataset, metric) in zip(axes, panels):
        sub = runs[runs.dataset == dataset]
        for (solver, corr), g in sub.groupby(["solver", "correction"]):
            m = g.groupby("steps")[metric].mean()
            ax.plot(m.index, m.values, marker="o", ls="-" if corr == "stein" else "--",
                    label=f"{solver} {corr}")
        floor = df[(df.dataset == dataset) & (df.solver == "true_samples")][metric]
        if len(floor):
            ax.axhline(float(floor.iloc[0]), color="grey", lw=0.8, label="real-data floor")
        ax.set(xlabel="steps", ylabel=metric, title=dataset, yscale="log")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def report_stage(cfg, ctx) -> None:
    df = read_table(ctx.inputs["evaluate"] / "metrics.parquet").to_pandas()
    checks = read_json(ctx.inputs["verify_stein"] / "stein_identity.json")
    result = criteria(df)
    write_json_atomic(ctx.out_dir / "criteria.json", result)
    sections = ["# steindiff report", "## Pass criteria", "```", _json_block(result), "```",
                f"Identity checks passed: {sum(c['passed'] for c in checks.values())}/{len(checks)}"]
    for dataset, metrics in (("mixture", ["sw2", "modes_covered", "mmd"]), ("digits", ["fd", "sw2"])):
        sub = df[df.dataset == dataset]
        for metric in metrics:
            sections += [f"## {dataset}: {metric} (mean over seeds; every solver and budget shown)",
                         _fmt_table(paired_table(sub, metric))]
        floor = sub[sub.solver == "true_samples"]
        if len(floor):
            sections.append("Real-data floor: " + ", ".join(
                f"{m}={float(floor[m].iloc[0]):.4g}" for m in metrics))
    write_bytes_atomic(ctx.out_dir / "report.md", ("\n\n".join(sections) + "\n").encode())
    _plot(df, ctx.out_dir / "quality_vs_steps.png")
    ctx.log_artifact(ctx.out_dir / "report.md")
    ctx.log_artifact(ctx.out_dir / "quality_vs_steps.png")
    flat = {k: v for k, v in result.items() if isinstance(v, (int, float, bool)) and v is not None}
    flat.update({f"C1_ratio_N{n}": r for n, r in result["C1_sw2_ratio"].items()})
    flat.update({f"C2_modes_N{n}": m for n, m in result["C2_modes_covered_stein"].items()})
    ctx.write_metrics(flat)


def _json_block(obj) -> str:
    import json

    return json.dumps(obj, indent=2)
