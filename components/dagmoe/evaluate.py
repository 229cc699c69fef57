"""Stages evaluate (validation loss and perplexity per eval set, in- and out-of-domain) and
analyze_routing (expert load, DAG edge gates, throughput) over every trained (variant, seed) model.

The eval sets are those build_corpus wrote (``meta.json``): ``val_id``/``val_ood`` for the small
corpora, The Pile / Wikipedia / FineWeb-Edu / C4 for the paper's. ``val_id_loss`` and
``val_ood_loss`` (what compare judges) are the mean loss over the in- and out-of-domain sets,
which for the small corpora are the two sets themselves."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from components.common.devices import resolve_device
from components.common.io import load_torch, read_json, write_json_atomic, write_table
from components.dagmoe.config import Model
from components.dagmoe.corpus import SMALL_EVAL_SETS, eval_sets, load_tokens
from components.dagmoe.model import build_model, mean_loss, moe_layers
from components.dagmoe.moe import DagRound, binary_entropy
from components.dagmoe.train import eval_windows

SPLITS = ("val_id", "val_ood")


def load_trained(run_dir: Path, device: str = "cpu") -> tuple[torch.nn.Module, dict]:
    ckpt = load_torch(Path(run_dir) / "model.pt")
    model = build_model(ckpt["variant"], Model.model_validate(ckpt["model_config"]),
                        ckpt["vocab_size"])
    model.load_state_dict(ckpt["state_dict"])
    return model.to(resolve_device(device)).eval(), ckpt


def validation_windows(corpus_dir: Path, context: int, max_tokens: int) -> dict[str, torch.Tensor]:
    return {s: eval_windows(load_tokens(corpus_dir, s), context, max_tokens)
            for s in eval_sets(corpus_dir)}


def first_in_domain(corpus_dir: Path) -> str:
    return next(name for name, domain in eval_sets(corpus_dir).items() if domain == "id")


def evaluate_row(model, windows: dict[str, torch.Tensor], domains: dict[str, str],
                 batch_size: int) -> dict[str, float]:
    """Loss and perplexity per eval set, plus the in-/out-of-domain means compare judges."""
    row = {}
    for name, w in windows.items():
        row[f"{name}_loss"] = mean_loss(model, w, batch_size)
        row[f"{name}_ppl"] = math.exp(row[f"{name}_loss"])
    for split, domain in (("val_id", "id"), ("val_ood", "ood")):
        if split not in windows:  # the paper's sets: average over the sets of the domain
            row[f"{split}_loss"] = float(np.mean([row[f"{n}_loss"] for n, d in domains.items()
                                                  if d == domain]))
            row[f"{split}_ppl"] = math.exp(row[f"{split}_loss"])
    return row


def evaluate_stage(cfg, ctx) -> None:
    torch.set_num_threads(cfg.eval.threads)
    rows = []
    runs, corpus = ctx.inputs["train"], ctx.inputs["build_corpus"]
    domains = eval_sets(corpus)
    for i, key in enumerate(sorted(runs)):
        model, ckpt = load_trained(runs[key], cfg.eval.device)
        windows = validation_windows(corpus, model.shape.context, cfg.eval.max_tokens)
        row = {"variant": ckpt["variant"], "seed": ckpt["seed"]}
        row.update(evaluate_row(model, windows, domains, cfg.eval.batch_size))
        rows.append(row)
        ctx.progress(i + 1, len(runs), f"evaluated {key}")
    write_table(ctx.out_dir / "evaluation.parquet",
                {k: [r[k] for r in rows] for k in rows[0]})
    ctx.write_metrics(evaluation_metrics(rows, list(domains)))


def evaluation_metrics(rows: list[dict], names: list[str]) -> dict[str, float]:
    """Mean loss per variant for val_id/val_ood; for the paper's sets also the mean loss and
    perplexity of each set (the small run's metric keys stay as they were committed)."""
    metrics = {}
    for variant in sorted({r["variant"] for r in rows}):
        mine = [r for r in rows if r["variant"] == variant]
        for split in SPLITS:
            metrics[f"{variant}/{split}_loss_mean"] = float(np.mean([r[f"{split}_loss"] for r in mine]))
        for name in (n for n in names if n not in SMALL_EVAL_SETS):
            metrics[f"{variant}/{name}_loss_mean"] = float(np.mean([r[f"{name}_loss"] for r in mine]))
            metrics[f"{variant}/{name}_ppl_mean"] = float(np.mean([r[f"{name}_ppl"] for r in mine]))
    return metrics


# ---------------------------------------------------------------------------- routing
@torch.no_grad()
def routing_statistics(model: torch.nn.Module, windows: torch.Tensor) -> dict:
    """Expert load per layer and, for DAG-MoE, statistics of the learned edge gates."""
    model(windows[:, :-1].to(next(model.parameters()).device))
    out: dict = {"layers": []}
    for layer in moe_layers(model):
        counts = torch.bincount(layer.stats["experts"].reshape(-1).cpu(),
                                minlength=layer.shape.n_experts).double()
        load = counts / counts.sum()
        entry = {"load": load.tolist(),
                 "load_cv": float(load.std(unbiased=False) / load.mean()),
                 "max_over_uniform": float(load.max() * layer.shape.n_experts)}
        entry.update(edge_gate_statistics(layer))
        out["layers"].append(entry)
    return out


def edge_gate_statistics(layer) -> dict:
    rounds = [m for m in layer.modules() if isinstance(m, DagRound)]
    stats = {}
    for r, dag_round in enumerate(rounds):
        gate = dag_round.last_edge_gates.float().cpu()  # (T, K, K, g)
        k = gate.shape[1]
        diagonal = torch.eye(k, dtype=torch.bool)
        stats[f"round{r}"] = {
            "mean_gate": float(gate.mean()),
            "mean_entropy_bits": float(binary_entropy(gate).mean()),
            "mean_self_gate": float(gate[:, diagonal].mean()),
            "mean_cross_gate": float(gate[:, ~diagonal].mean()) if k > 1 else float("nan"),
            "gate_matrix": gate.mean(dim=(0, 3)).tolist(),  # average K x K adjacency
        }
    return stats


@torch.no_grad()
def forward_tokens_per_second(model: torch.nn.Module, windows: torch.Tensor, batch_size: int,
                              n_batches: int) -> float:
    device = next(model.parameters()).device
    batch = windows[:batch_size, :-1].to(device)
    model(batch)  # warm-up
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(n_batches):
        model(batch)
    _synchronize(device)
    return n_batches * batch.numel() / (time.perf_counter() - start)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":  # kernels run asynchronously; time them to the end
        torch.cuda.synchronize(device)


def analyze_routing_stage(cfg, ctx) -> None:
    torch.set_num_threads(cfg.eval.threads)
    runs, corpus = ctx.inputs["train"], ctx.inputs["build_corpus"]
    report, throughput, step_time = {}, {}, {}
    for i, key in enumerate(sorted(runs)):
        model, ckpt = load_trained(runs[key], cfg.eval.device)
        windows = eval_windows(load_tokens(corpus, first_in_domain(corpus)), model.shape.context,
                               cfg.eval.max_tokens)
        report[key] = routing_statistics(model, windows[:cfg.eval.batch_size])
        throughput.setdefault(ckpt["variant"], []).append(forward_tokens_per_second(
            model, windows, cfg.eval.batch_size, cfg.eval.throughput_batches))
        step_time.setdefault(ckpt["variant"], []).append(
            read_json(Path(runs[key]) / "summary.json")["seconds_per_step"])
        ctx.progress(i + 1, len(runs), f"analysed {key}")
    summary = {"throughput_tokens_per_s": {v: float(np.mean(x)) for v, x in throughput.items()},
               "train_seconds_per_step": {v: float(np.median(x)) for v, x in step_time.items()}}
    if {"dag_moe", "moe_shared"} <= throughput.keys():
        # Time measurements on a shared machine are noisy; the ratio is reported, never judged.
        summary["forward_overhead"] = (summary["throughput_tokens_per_s"]["moe_shared"]
                                       / summary["throughput_tokens_per_s"]["dag_moe"] - 1)
        summary["train_step_overhead"] = (summary["train_seconds_per_step"]["dag_moe"]
                                          / summary["train_seconds_per_step"]["moe_shared"] - 1)
    write_json_atomic(ctx.out_dir / "routing.json", {"runs": report, "summary": summary})
    # The metrics file holds what params + seed determine; wall-clock numbers go to MLflow only.
    ctx.write_metrics(_flat_routing_metrics(report))
    ctx.log_metrics({k: v for k, v in summary.items() if isinstance(v, float)})


def _flat_routing_metrics(report: dict) -> dict:
    metrics = {}
    for variant in {key.rsplit("-", 1)[0] for key in report}:
        layers = [layer for key, run in report.items() if key.rsplit("-", 1)[0] == variant
                  for layer in run["layers"]]
        metrics[f"{variant}/load_cv_mean"] = float(np.mean([layer["load_cv"] for layer in layers]))
        gates = [layer[r] for layer in layers for r in layer if r.startswith("round")]
        if gates:
            for stat in ("mean_gate", "mean_entropy_bits", "mean_self_gate", "mean_cross_gate"):
                metrics[f"{variant}/{stat}"] = float(np.mean([g[stat] for g in gates]))
    return metrics
