"""Aggregate per-seed results: OOD accuracy against the number of ablated directions k, for the
probe-chosen subspace and for random subspaces of the same k, and the numbers the CLAIMS.md
criteria judge. Thresholds live in the CLAIMS.md front matter, not here."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from components.common.io import read_json, write_json_atomic, write_table
from components.common.metrics import paired_difference, summarize

METRICS = ("id_acc", "ood_intended_acc", "ood_spurious_rate", "val_ood_intended_acc")
# the emergent-misalignment task of the paper profile (paper.py, evaluate_em)
EM_METRICS = ("misaligned_rate", "coherent_rate", "mean_aligned", "insecure_code_rate")


def task_metrics(cfg) -> tuple[str, ...]:
    return EM_METRICS if cfg.paper.enabled and cfg.paper.task == "em" else METRICS


def point_name(variant: str, percent: int) -> str:
    return f"{variant}_k{percent}"


def _mean(rows: list[dict], key: str) -> float:
    return float(np.mean([r[key] for r in rows]))


def headline(baseline: list[dict], at_k_star: dict[str, list[dict]]) -> dict[str, float]:
    """Means over seeds at the full subspace (k*). Each number stands alone: C3 compares CAFT
    with random directions directly, whether or not CAFT beat standard fine-tuning (C1)."""
    base_ood = _mean(baseline, "ood_intended_acc")
    caft_ood, random_ood = (_mean(at_k_star[v], "ood_intended_acc") for v in ("caft", "random"))
    out = {"caft_gain_at_kstar": caft_ood - base_ood,
           "random_gain_at_kstar": random_ood - base_ood,
           "caft_minus_random_at_kstar": caft_ood - random_ood,
           "id_gap_at_kstar": abs(_mean(at_k_star["caft"], "id_acc") - _mean(baseline, "id_acc"))}
    if "top" in at_k_star:   # the paper profile's uninterpreted top PCs / latents
        out["caft_minus_top_at_kstar"] = caft_ood - _mean(at_k_star["top"], "ood_intended_acc")
    return out


def em_headline(baseline: list[dict], at_k_star: dict[str, list[dict]]) -> dict[str, float]:
    """The paper's EM numbers: how many times fewer misaligned answers than standard fine-tuning
    (the abstract's "10x"), for CAFT and for random directions, and the change in the
    insecure-code rate (the behaviour that should be kept)."""
    base = _mean(baseline, "misaligned_rate")
    caft, rand = (_mean(at_k_star[v], "misaligned_rate") for v in ("caft", "random"))
    ratio = lambda x: base / x if x > 0 else float("nan")  # noqa: E731  (no misaligned answer left: undefined)
    out = {"caft_misalignment_reduction_at_kstar": ratio(caft),
           "random_misalignment_reduction_at_kstar": ratio(rand),
           "caft_minus_random_misaligned_at_kstar": caft - rand,
           "insecure_code_gap_at_kstar": abs(_mean(at_k_star["caft"], "insecure_code_rate")
                                             - _mean(baseline, "insecure_code_rate"))}
    if "top" in at_k_star:
        top = _mean(at_k_star["top"], "misaligned_rate")
        out["top_misalignment_reduction_at_kstar"] = ratio(top)
        out["caft_minus_top_misaligned_at_kstar"] = caft - top
    return out


def evaluate_stage(cfg, ctx) -> None:
    metric_names = task_metrics(cfg)
    baseline = [read_json(Path(ctx.inputs["pretune"][str(s)]) / "eval.json") for s in cfg.seeds]
    points = {(v, p): [read_json(Path(ctx.inputs["caft_train"][f"{v}-{p}-{s}"]) / "eval.json")
                       for s in cfg.seeds]
              for v in cfg.caft.variants for p in cfg.caft.k_percents}
    rows = [{"variant": "standard_ft", "percent": 0, "k": 0, **r} for r in baseline]
    rows += [r for runs in points.values() for r in runs]
    write_table(ctx.out_dir / "per_seed.parquet",
                {key: [r.get(key) for r in rows] for key in ("variant", "percent", "seed", "k", *metric_names)})
    summary = {"standard_ft": {m: summarize([r[m] for r in baseline]) for m in metric_names}}
    flat = {f"standard_ft/{m}": summary["standard_ft"][m]["mean"] for m in metric_names}
    for (variant, percent), runs in points.items():
        name = point_name(variant, percent)
        summary[name] = {m: summarize([r[m] for r in runs]) for m in metric_names}
        primary, gain = (("misaligned_rate", "misaligned_change_vs_standard") if metric_names is EM_METRICS
                         else ("ood_intended_acc", "ood_gain_vs_standard"))
        summary[name][gain] = paired_difference(
            [r[primary] for r in runs], [r[primary] for r in baseline])
        summary[name]["k"] = [r["k"] for r in runs]
        flat.update({f"{name}/{m}": summary[name][m]["mean"] for m in metric_names})
        flat[f"{name}/k"] = runs[0]["k"]
    k_star = max(cfg.caft.k_percents)
    at_k_star = {v: points[(v, k_star)] for v in cfg.caft.variants}
    numbers = (em_headline if metric_names is EM_METRICS else headline)(baseline, at_k_star)
    write_json_atomic(ctx.out_dir / "summary.json", {"summary": summary, "headline": numbers})
    ctx.write_metrics({**flat, **numbers})
