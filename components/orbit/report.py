"""Stage report: the pass criteria of CLAIMS.md, computed from the evaluation over seeds."""
from __future__ import annotations

import numpy as np

from components.common.io import read_json, write_json_atomic
from components.common.metrics import paired_difference


def report_stage(cfg, ctx) -> None:
    r = cfg.report
    results = read_json(ctx.inputs["evaluate"] / "results.json")
    agree = read_json(ctx.inputs["judge_agreement"] / "agreement.json")
    seeds = list(cfg.seeds)

    def per_seed(variant: str, key=lambda x: x["overall"]["score"]) -> list[float]:
        return [key(results[f"{variant}-{s}"]) for s in seeds if f"{variant}-{s}" in results]

    base = results["base"]["overall"]["score"]
    orbit = per_seed(r.orbit_variant)
    generic = per_seed("generic")
    other = "orbit_all" if r.orbit_variant == "orbit_curriculum" else "orbit_curriculum"
    alt = per_seed(other)
    gain_base = float(np.mean(orbit) - base)
    gain_generic = float(np.mean(orbit) - np.mean(generic)) if generic else float("nan")
    pos = per_seed(r.orbit_variant, lambda x: x["positive_hit_rate"])
    neg = per_seed(r.orbit_variant, lambda x: x["negative_rate"])
    c3 = float(np.mean(pos)) > results["base"]["positive_hit_rate"] and float(np.mean(neg)) < results["base"]["negative_rate"]
    metrics = {
        "orbit_variant": r.orbit_variant, "n_seeds": len(orbit),
        "score_base": base, "score_orbit": float(np.mean(orbit)), "score_generic": float(np.mean(generic)),
        f"score_{other}": float(np.mean(alt)) if alt else float("nan"),
        "gain_vs_base": gain_base, "gain_vs_generic": gain_generic,
        "c1_pass": float(gain_base >= r.min_gain_vs_base),
        "c2_pass": float(gain_generic >= r.min_gain_vs_generic),
        "positive_hit_rate_base": results["base"]["positive_hit_rate"],
        "positive_hit_rate_orbit": float(np.mean(pos)),
        "negative_rate_base": results["base"]["negative_rate"], "negative_rate_orbit": float(np.mean(neg)),
        "c3_pass": float(c3),
        "curriculum_minus_all": (float(np.mean(per_seed("orbit_curriculum")) - np.mean(per_seed("orbit_all")))
                                 if per_seed("orbit_curriculum") and per_seed("orbit_all") else float("nan")),
        "kappa_heldout": agree["kappa_heldout"],
    }
    if len(orbit) == len(generic) and len(orbit) > 1:
        d = paired_difference(orbit, generic)
        metrics.update(gain_vs_generic_ci_low=d["ci_low"], gain_vs_generic_ci_high=d["ci_high"],
                       gain_vs_generic_wins=d["wins"])
    write_json_atomic(ctx.out_dir / "criteria.json", metrics)
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
