"""Stage report: the premise checks (validation split) and the pass criteria of CLAIMS.md
(held-out test split) over seeds, plus the per-axis HealthBench table."""
from __future__ import annotations

import numpy as np

from components.common.io import read_json, write_json_atomic
from components.common.metrics import paired_difference
from components.orbit.ontology import AXES

VARIANTS = ("orbit_review", "orbit_admission", "orbit_all", "generic")


def per_seed(results: dict, variant: str, seeds: list[int], key=lambda x: x["overall"]["score"]) -> list[float]:
    return [key(results[f"{variant}-{s}"]) for s in seeds if f"{variant}-{s}" in results]


def mean_or_nan(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def axis_table(results: dict, seeds: list[int]) -> dict[str, dict[str, float]]:
    """policy (base, or variant averaged over seeds) -> axis -> HealthBench tag score."""
    def axis(r, a):
        return r["tags"].get(f"axis:{a}", float("nan"))

    table = {"base": {a: axis(results["base"], a) for a in AXES}}
    for v in VARIANTS:
        rows = [results[f"{v}-{s}"] for s in seeds if f"{v}-{s}" in results]
        if rows:
            table[v] = {a: float(np.nanmean([axis(r, a) for r in rows])) for a in AXES}
    return table


def axis_markdown(table: dict[str, dict[str, float]]) -> str:
    lines = ["| policy | " + " | ".join(AXES) + " |", "|---" * (len(AXES) + 1) + "|"]
    lines += [f"| {p} | " + " | ".join(f"{row[a]:.3f}" for a in AXES) + " |" for p, row in table.items()]
    return "\n".join(lines) + "\n"


def premise_metrics(val: dict, seeds: list[int]) -> dict[str, float]:
    case_all, generic = per_seed(val, "orbit_all", seeds), per_seed(val, "generic", seeds)
    return {"score_base_val": val["base"]["overall"]["score"],
            "score_orbit_all_val": mean_or_nan(case_all), "score_generic_val": mean_or_nan(generic),
            "premise_case_minus_generic_val": mean_or_nan(case_all) - mean_or_nan(generic)}


def report_stage(cfg, ctx) -> None:
    r = cfg.report
    results = read_json(ctx.inputs["evaluate"] / "results.json")
    val_path = ctx.inputs["evaluate"] / "val_results.json"
    agree = read_json(ctx.inputs["judge_agreement"] / "agreement.json")
    seeds = list(cfg.seeds)

    base = results["base"]["overall"]["score"]
    scores = {v: per_seed(results, v, seeds) for v in VARIANTS}
    orbit, generic = scores[r.orbit_variant], scores["generic"]
    pos = per_seed(results, r.orbit_variant, seeds, lambda x: x["positive_hit_rate"])
    neg = per_seed(results, r.orbit_variant, seeds, lambda x: x["negative_rate"])
    c3 = mean_or_nan(pos) > results["base"]["positive_hit_rate"] and mean_or_nan(neg) < results["base"]["negative_rate"]
    metrics = {
        "orbit_variant": r.orbit_variant, "n_seeds": len(orbit), "score_base": base,
        "score_orbit": mean_or_nan(orbit), **{f"score_{v}": mean_or_nan(s) for v, s in scores.items()},
        "gain_vs_base": mean_or_nan(orbit) - base, "gain_vs_generic": mean_or_nan(orbit) - mean_or_nan(generic),
        "positive_hit_rate_base": results["base"]["positive_hit_rate"], "positive_hit_rate_orbit": mean_or_nan(pos),
        "negative_rate_base": results["base"]["negative_rate"], "negative_rate_orbit": mean_or_nan(neg),
        "c3_pass": float(c3),
        "review_minus_all": mean_or_nan(scores["orbit_review"]) - mean_or_nan(scores["orbit_all"]),
        "admission_minus_base": mean_or_nan(scores["orbit_admission"]) - base,
        "kappa_heldout": agree["kappa_heldout"],
    }
    if val_path.exists():
        metrics.update(premise_metrics(read_json(val_path), seeds))
    if len(orbit) == len(generic) and len(orbit) > 1:
        d = paired_difference(orbit, generic)
        metrics.update(gain_vs_generic_ci_low=d["ci_low"], gain_vs_generic_ci_high=d["ci_high"],
                       gain_vs_generic_wins=d["wins"])
    table = axis_table(results, seeds)
    metrics.update({f"axis_{a}_{p}": v for p, row in table.items() for a, v in row.items()})
    write_json_atomic(ctx.out_dir / "criteria.json", {**metrics, "axis_table": table})
    (ctx.out_dir / "axis_table.md").write_text(axis_markdown(table))
    ctx.write_metrics(metrics)
    _plot(results, ctx)


def _plot(results: dict, ctx) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    scores = [results[n]["overall"]["score"] for n in names]
    errs = [results[n]["overall"]["bootstrap_std"] for n in names]
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(names)), 3))
    ax.bar(range(len(names)), scores, yerr=errs)
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("held-out HealthBench-format score")
    fig.tight_layout()
    path = ctx.out_dir / "scores.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    ctx.log_artifact(path)
