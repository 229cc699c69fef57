"""Scoring on the held-out domain, and the premise checks and pass criteria of CLAIMS.md.

``evaluate`` is the only stage that reads test-domain rows (``test_split``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import softmax

from components.common.io import load_torch, read_json, read_table, write_json_atomic, write_table
from components.common.metrics import summarize
from components.domed.data import fold_envs, load_domains, test_split
from components.domed.losses import dirichlet_alpha
from components.domed.models import predict_logits
from components.domed.train import DIAGNOSTICS, ENSEMBLE, STUDENTS, instance_item, load_models
from components.domed.uncertainty import (dirichlet_uncertainty, ensemble_uncertainty, reliability,
                                          softmax_uncertainty)

ROWS = "rows.parquet"
METRICS = ("acc", "nll", "ece", "prr", "auroc")


def score_fold(cfg, ensemble: dict, students: dict[str, dict], x, y: np.ndarray, n_classes: int = 10) -> dict:
    """{method: reliability metrics} for the baselines and every student variant."""
    bins, batch = cfg.evaluation.ece_bins, cfg.model.predict_batch
    members = [predict_logits(m, x, batch).numpy() for m in load_models(cfg, ensemble["states"], n_classes)]
    member_probs = softmax(np.stack(members), axis=-1)
    erm_scaled = members[0] / ensemble["temperature"]
    results = {
        "erm": reliability(member_probs[0], y, softmax_uncertainty(members[0]), bins),
        "erm_ts": reliability(softmax(erm_scaled, axis=-1), y, softmax_uncertainty(erm_scaled), bins),
        "ensemble": reliability(member_probs.mean(0), y, ensemble_uncertainty(member_probs), bins),
        **score_weight_averages(cfg, ensemble, x, y, n_classes),
    }
    for variant, state in students.items():
        logits = predict_logits(load_models(cfg, [state], n_classes)[0], x, batch)
        alpha = dirichlet_alpha(logits, cfg.student.logit_clip).double().numpy()
        results[variant] = reliability(softmax(logits.numpy(), axis=-1), y, dirichlet_uncertainty(alpha), bins)
    return results


def score_weight_averages(cfg, ensemble: dict, x, y: np.ndarray, n_classes: int) -> dict:
    """EoA (the members' moving averages, ensembled on averaged probabilities like ``ensemble``)
    and DiWA (one weight-averaged model), where ``train_erm`` built them."""
    bins, batch, out = cfg.evaluation.ece_bins, cfg.model.predict_batch, {}
    if "eoa_states" in ensemble:
        logits = [predict_logits(m, x, batch).numpy() for m in load_models(cfg, ensemble["eoa_states"], n_classes)]
        probs = softmax(np.stack(logits), axis=-1)
        out["eoa"] = reliability(probs.mean(0), y, ensemble_uncertainty(probs), bins)
    if "diwa_state" in ensemble:
        logits = predict_logits(load_models(cfg, [ensemble["diwa_state"]], n_classes)[0], x, batch).numpy()
        out["diwa"] = reliability(softmax(logits, axis=-1), y, softmax_uncertainty(logits), bins)
    return out


def evaluate_stage(cfg, ctx) -> None:
    benchmark, seed = instance_item(ctx)
    arrays = load_domains(ctx.inputs["build_domains"], benchmark, cfg.data)
    ensembles = load_torch(ctx.inputs["train_erm"] / ENSEMBLE)          # this instance's items only
    students = load_torch(ctx.inputs["train_student"] / STUDENTS)
    rows = []
    for test_env in fold_envs(cfg.data.test_envs, arrays["n_domains"]):
        test = test_split(arrays, test_env)
        fold_students = {v: students[v][test_env] for v in cfg.student.variants}
        results = score_fold(cfg, ensembles[test_env], fold_students, test.x, test.y, arrays["n_classes"])
        rows += [{"benchmark": benchmark, "method": method, "test_env": test_env, "seed": seed, **values}
                 for method, values in results.items()]
    table = pd.DataFrame(rows)
    write_table(ctx.out_dir / ROWS, table)
    ctx.write_metrics({f"{method}/{name}": float(group[name].mean())
                       for method, group in table.groupby("method", sort=False) for name in METRICS})


def summary_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard error over all (test domain, seed) folds, per method."""
    out = {}
    for method, group in rows.groupby("method", sort=False):
        stats = {m: summarize(group[m].to_numpy()) for m in METRICS}
        out[method] = {**{m: s["mean"] for m, s in stats.items()},
                       **{f"{m}_se": s["std"] / np.sqrt(s["n"]) for m, s in stats.items()}, "n": len(group)}
    return pd.DataFrame(out).T


def per_domain_table(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    return rows.pivot_table(index="method", columns="test_env", values=metric, aggfunc="mean", sort=False)


def pass_criteria(rows: pd.DataFrame, ev) -> dict:
    """D1-D4 of CLAIMS.md on means over all folds (+ per-fold paired differences)."""
    s = summary_table(rows)
    d, erm, kd, end2 = s.loc["domed"], s.loc["erm"], s.loc["kd_seen"], s.loc["end2_only"]
    paired = rows.pivot_table(index=["test_env", "seed"], columns="method", values=["ece", "acc"])
    return {
        "D1_ece_ratio_vs_erm": float(d.ece / erm.ece),
        "D1_nll_gap_vs_erm": float(d.nll - erm.nll),
        "D1_pass": bool(d.ece <= ev.d1_ece_ratio * erm.ece and d.nll < erm.nll),
        "D2_acc_gap_vs_erm": float(d.acc - erm.acc),
        "D2_pass": bool(d.acc >= erm.acc - ev.d2_acc_margin),
        "D3_ece_gap_vs_kd_seen": float(d.ece - kd.ece),
        "D3_pass": bool(d.ece < kd.ece),
        "D4_acc_gap_vs_end2": float(d.acc - end2.acc),
        "D4_prr_gap_vs_erm": float(d.prr - erm.prr),
        "D4_pass": bool(d.acc >= end2.acc - ev.d4_acc_margin and d.prr >= erm.prr),
        "folds_domed_ece_below_erm": int((paired["ece"]["domed"] < paired["ece"]["erm"]).sum()),
        "folds": int(len(paired)),
    }


def premise_checks(diagnostics: list[dict], ev) -> dict:
    """P1/P2 of CLAIMS.md from the teachers' source-domain diagnostics of every fold: unseen
    accuracy >= ratio x seen-domain validation accuracy, and no more over-confidence unseen."""
    folds = pd.DataFrame(diagnostics)
    ratio, gap = folds["premise_acc_ratio"], folds["premise_overconf_gap"]
    means = {name: float(folds[name].mean()) for name in folds.columns}
    return {**{f"premise/{k}": v for k, v in means.items()},
            "premise/acc_ratio_min_fold": float(ratio.min()),
            "premise/overconf_gap_max_fold": float(gap.max()),
            "P1_pass": bool(ratio.mean() >= ev.p1_acc_ratio),
            "P2_pass": bool(gap.mean() <= ev.p2_overconf_gap)}


def aggregate_stage(cfg, ctx) -> None:
    rows = pd.concat([read_table(p / ROWS).to_pandas() for p in ctx.inputs["evaluate"].values()],
                     ignore_index=True)
    write_table(ctx.out_dir / "all_rows.parquet", rows)
    diagnostics = {}
    for key, folder in ctx.inputs["teacher_predict"].items():
        benchmark = key.rsplit("-", 1)[0]
        diagnostics.setdefault(benchmark, []).extend(read_json(folder / DIAGNOSTICS).values())
    report, summaries, metrics = [], {}, {}
    for benchmark, group in rows.groupby("benchmark", sort=False):
        summary = summary_table(group)
        checks = {**premise_checks(diagnostics[benchmark], cfg.evaluation),
                  **pass_criteria(group, cfg.evaluation)}
        summaries[benchmark] = {"methods": summary.to_dict(orient="index"), "criteria": checks}
        metrics.update({f"{benchmark}/{k}": v for k, v in checks.items()})
        metrics.update({f"{benchmark}/{m}/{k}": float(summary.loc[m, k]) for m in summary.index for k in METRICS})
        report += [f"# {benchmark}", "", "## Mean over test domains x seeds (standard error)", "",
                   _markdown(summary, METRICS), ""]
        for metric in ("acc", "ece", "nll"):
            report += [f"## {metric} per test domain (mean over seeds)", "",
                       _pivot_markdown(per_domain_table(group, metric)), ""]
    (ctx.out_dir / "results.md").write_text("\n".join(report))
    write_json_atomic(ctx.out_dir / "summary.json", summaries)
    ctx.log_artifact(ctx.out_dir / "results.md")
    ctx.write_metrics(metrics)


def _markdown(summary: pd.DataFrame, names) -> str:
    lines = ["| method | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for method, row in summary.iterrows():
        cells = [f"{row[n]:.3f} ± {row[n + '_se']:.3f}" for n in names]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pivot_markdown(table: pd.DataFrame) -> str:
    lines = ["| method | " + " | ".join(f"domain {c}" for c in table.columns) + " |",
             "|---" * (len(table.columns) + 1) + "|"]
    for method, row in table.iterrows():
        lines.append(f"| {method} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    return "\n".join(lines)
