"""evaluate (test metrics of every trained run) and compare (pass criteria, table, plot)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from components.common.io import load_torch, read_json, read_table, write_json_atomic, write_table
from components.common.metrics import summarize
from components.ioadam import tasks
from components.ioadam.data import load_corpus, load_digits_splits
from components.ioadam.training import build_lm, device_of


# -- evaluate ----------------------------------------------------------------------------------

def _load_model(model: torch.nn.Module, run_dir: Path) -> torch.nn.Module:
    model.load_state_dict(load_torch(Path(run_dir) / "model.pt"))
    return model.eval()


def evaluate_stage(cfg, ctx) -> None:
    torch.set_num_threads(cfg.device.threads)
    splits = load_digits_splits(ctx.inputs["prepare_digits"])
    corpus = load_corpus(ctx.inputs["prepare_corpus"])
    rows: list[dict[str, Any]] = []
    for run_dir in ctx.inputs["train_digits"].values():
        run = read_json(Path(run_dir) / "run.json")
        test = tasks.digits_scores(_load_model(tasks.MLP(cfg.digits.sizes), run_dir),
                                   splits["x_test"], splits["y_test"])
        rows.append(_row("digits", run, val=run["val_acc"], test=test["acc"], test_loss=test["loss"]))
    c, dev = cfg.charlm, device_of(cfg.device)
    for run_dir in ctx.inputs["train_charlm"].values():
        run = read_json(Path(run_dir) / "run.json")
        model = _load_model(build_lm(c), run_dir).to(dev)
        loss = tasks.lm_eval_loss(model, corpus["test"].to(dev), c.seq_len, c.eval_windows)
        rows.append(_row("charlm", run, val=run["val_loss"], test=loss, test_loss=loss))
    write_table(ctx.out_dir / "results.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    metrics = {f"{r['task']}/{r['optimizer']}/seed{r['seed']}/test": r["test"] for r in rows}
    metrics.update({f"charlm/{r['optimizer']}/seed{r['seed']}/test_ppl": r["test_ppl"]
                    for r in rows if r["task"] == "charlm"})
    ctx.write_metrics(metrics)


def _row(task: str, run: dict, val: float, test: float, test_loss: float) -> dict[str, Any]:
    """``val``/``test``: accuracy for digits, mean next-token loss for the LM (``test_ppl`` its
    perplexity: per byte for the byte model, per token for LLaMA; NaN for digits)."""
    ppl = tasks.perplexity(test_loss) if task == "charlm" else math.nan
    return {"task": task, "optimizer": run["optimizer"], "seed": int(run["seed"]), "lr": float(run["lr"]),
            "val": float(val), "test": float(test), "test_loss": float(test_loss), "test_ppl": ppl,
            "state_bytes_matrix": int(run["state_bytes_matrix"]),
            "state_bytes_total": int(run["state_bytes_total"])}


# -- compare -----------------------------------------------------------------------------------

def per_optimizer(results: list[dict], task: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({r["optimizer"] for r in results if r["task"] == task}):
        runs = sorted((r for r in results if r["task"] == task and r["optimizer"] == name),
                      key=lambda r: r["seed"])
        out[name] = {"test": summarize([r["test"] for r in runs]), "val": summarize([r["val"] for r in runs]),
                     "seeds": [r["seed"] for r in runs], "lr": runs[0]["lr"],
                     "state_bytes_matrix": runs[0]["state_bytes_matrix"]}
        if task == "charlm" and "test_ppl" in runs[0]:
            out[name]["test_ppl"] = summarize([r["test_ppl"] for r in runs])
    return out


def pooled_sd(a: dict, b: dict) -> float:
    """Pooled seed standard deviation of two summaries (NaN with fewer than 2 seeds each)."""
    if a["n"] < 2 or b["n"] < 2:
        return math.nan
    return math.sqrt(((a["n"] - 1) * a["std"] ** 2 + (b["n"] - 1) * b["std"] ** 2) / (a["n"] + b["n"] - 2))


def premise_gap(lm: dict, crit) -> dict[str, Any]:
    """P1: Adam's validation-loss lead over tuned SGD-momentum, in pooled seed std (validation only)."""
    adam, sgdm = lm["adam"]["val"], lm["sgdm"]["val"]
    gap, sd = sgdm["mean"] - adam["mean"], pooled_sd(adam, sgdm)
    gap_sd = gap / sd if sd > 0 else (math.inf if gap > 0 and sd == 0 else math.nan)
    return {"adam_val_loss": adam["mean"], "sgdm_val_loss": sgdm["mean"], "gap": gap, "pooled_sd": sd,
            "gap_in_sd": gap_sd, "pass": bool(gap_sd >= crit.premise_gap_sd_min)}


def gain_share(io: float, adam: float, sgdm: float) -> float:
    """How much of Adam's test-loss gain over SGD-m IO-Adam keeps: (SGDm - IO) / (SGDm - Adam)."""
    return (sgdm - io) / (sgdm - adam) if sgdm != adam else math.nan


def check_criteria(results: list[dict], memory: list[dict], crit, sweeps: dict | None = None) -> dict[str, Any]:
    """The criteria of CLAIMS.md: C1 (state bytes), P1/P2 (premises: Adam matters on the LM; every
    chosen lr interior), C2/C3 (LM quality vs SGD-m and Adam), R1 and D (digits) reported."""
    digits, lm = per_optimizer(results, "digits"), per_optimizer(results, "charlm")
    checks: dict[str, Any] = {}
    for task, table in (("digits", digits), ("charlm", lm)):
        if "adam" not in table:
            continue
        for name in (n for n in table if n.startswith("ioadam")):
            mem = next((m for m in memory if m["task"] == task and m["optimizer"] == name), None)
            counted = table[name]["state_bytes_matrix"]
            saving = 1 - counted / table["adam"]["state_bytes_matrix"]
            formula_ok = mem is not None and mem["formula_state_bytes_matrix"] == counted
            checks[f"C1/{task}/{name}"] = {"saving": saving, "matches_formula": formula_ok,
                                           "pass": saving >= crit.state_saving_min and formula_ok}
    for m in memory:
        if m["optimizer"] != "adam":
            checks[f"R1/{m['task']}/{m['optimizer']}"] = {
                "total_peak_saving": m["total_peak_bytes_saving_vs_adam"], "total_peak_bytes": m["total_peak_bytes"],
                "step_time_ratio": m["step_time_ratio_vs_adam"], "timed_repeats": m["timed_repeats"]}
    if sweeps:
        checks["P2"] = {**{f"{name}_lr": s["best_lr"] for name, s in sweeps.items()},
                        "pass": all(s["interior"] for s in sweeps.values())}
    if {"adam", "sgdm"} <= set(lm):
        checks["P1"] = premise_gap(lm, crit)
    for name in (n for n in lm if n.startswith("ioadam") and "adam" in lm):
        io, adam = lm[name]["test"]["mean"], lm["adam"]["test"]["mean"]
        if "sgdm" in lm:
            share = gain_share(io, adam, lm["sgdm"]["test"]["mean"])
            checks[f"C2/{name}"] = {"gain_share": share, "pass": bool(share >= crit.gain_share_min)}
        checks[f"C3/{name}"] = {"loss_ratio_vs_adam": io / adam, "pass": io / adam <= crit.lm_loss_ratio_max}
    for name in (n for n in digits if n.startswith("ioadam") and "adam" in digits):   # reported only
        io = 100 * digits[name]["test"]["mean"]
        checks[f"D/{name}"] = {"adam_minus_ioadam_points": 100 * digits["adam"]["test"]["mean"] - io,
                               **{f"ioadam_minus_{base}_points": io - 100 * digits[base]["test"]["mean"]
                                  for base in ("sgd", "sgdm") if base in digits}}
    return {"checks": checks, "digits": digits, "charlm": lm}


def markdown_table(report: dict[str, Any], memory: list[dict]) -> str:
    lines = ["| task | optimizer | lr | test (mean ± std over seeds) | matrix state bytes | step peak bytes | peak saving vs Adam | step time / Adam |",
             "|---|---|---|---|---|---|---|---|"]
    for task, metric in (("digits", "acc"), ("charlm", "loss")):
        for name, s in report[task].items():
            mem = next((m for m in memory if m["task"] == task and m["optimizer"] == name), {})
            t = s["test"]
            ppl = f" (ppl {s['test_ppl']['mean']:.2f})" if "test_ppl" in s else ""
            lines.append(f"| {task} | {name} | {s['lr']:g} | {metric} {t['mean']:.4f} ± {t['std']:.4f} (n={t['n']}){ppl} "
                         f"| {s['state_bytes_matrix']:,} | {mem.get('total_peak_bytes', float('nan')):,.0f} "
                         f"| {mem.get('total_peak_bytes_saving_vs_adam', float('nan')):.1%} "
                         f"| {mem.get('step_time_ratio_vs_adam', float('nan')):.2f} |")
    lines += ["", "| task | optimizer (memory profile) | matrix state bytes (formula) | grad bytes | persistent | transient peak | total peak | state saving | peak saving | step time / Adam (median of repeats) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for m in memory:
        lines.append(f"| {m['task']} | {m['optimizer']} | {m['state_bytes_matrix']:,} ({m['formula_state_bytes_matrix']:,}) "
                     f"| {m['grad_bytes']:,} | {m['persistent_bytes']:,} | {m['transient_peak_bytes']:,} "
                     f"| {m['total_peak_bytes']:,} | {m['state_bytes_matrix_saving_vs_adam']:.1%} "
                     f"| {m['total_peak_bytes_saving_vs_adam']:.1%} | {m['step_time_ratio_vs_adam']:.2f} (n={m['timed_repeats']}) |")
    lines += ["", "| criterion | numbers | pass |", "|---|---|---|"]
    for cid, check in report["checks"].items():
        nums = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in check.items() if k != "pass")
        lines.append(f"| {cid} | {nums} | {check.get('pass', 'reported')} |")
    return "\n".join(lines) + "\n"


def plot_quality_vs_memory(report: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, task, label in ((axes[0], "digits", "test accuracy"), (axes[1], "charlm", "test loss (nats/byte)")):
        for name, s in report[task].items():
            ax.errorbar(s["state_bytes_matrix"] / 1024, s["test"]["mean"], yerr=s["test"]["std"],
                        fmt="o", capsize=3)
            ax.annotate(name, (s["state_bytes_matrix"] / 1024, s["test"]["mean"]), fontsize=8)
        ax.set_xlabel("optimizer state of matrix params (KiB)")
        ax.set_ylabel(label)
        ax.set_title(task)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare_stage(cfg, ctx) -> None:
    results = read_table(Path(ctx.inputs["evaluate"]) / "results.parquet").to_pylist()
    memory = read_table(Path(ctx.inputs["memory_profile"]) / "memory.parquet").to_pylist()
    sweeps = {name: read_json(Path(d) / "sweep.json") for name, d in ctx.inputs["sweep_charlm"].items()}
    report = check_criteria(results, memory, cfg.criteria, sweeps)
    write_json_atomic(ctx.out_dir / "report.json", report)
    (ctx.out_dir / "table.md").write_text(markdown_table(report, memory))
    plot_quality_vs_memory(report, ctx.out_dir / "quality_vs_memory.png")
    for name in ("table.md", "quality_vs_memory.png"):
        ctx.log_artifact(ctx.out_dir / name)
    metrics = {}
    for cid, check in report["checks"].items():
        for k, v in check.items():
            metrics[f"{cid}/{k}"] = v if not isinstance(v, (bool, np.bool_)) else bool(v)
    for name, s in report["charlm"].items():      # the paper's LM metric: perplexity, beside memory
        if "test_ppl" in s:
            metrics[f"charlm/{name}/test_ppl_mean"] = s["test_ppl"]["mean"]
    gated = [c["pass"] for cid, c in report["checks"].items() if "pass" in c and not cid.startswith("P")]
    metrics["all_pass"] = all(gated)
    ctx.write_metrics(metrics)
