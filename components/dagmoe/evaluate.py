"""Stages evaluate (validation loss in- and out-of-domain) and analyze_routing (expert load,
DAG edge gates, throughput) over every trained (variant, seed) model."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from components.common.io import load_torch, read_json, write_json_atomic, write_table
from components.dagmoe.config import Model
from components.dagmoe.model import build_model, mean_loss, moe_layers
from components.dagmoe.moe import DagRound, binary_entropy
from components.dagmoe.train import eval_windows

SPLITS = ("val_id", "val_ood")


def load_trained(run_dir: Path) -> tuple[torch.nn.Module, dict]:
    ckpt = load_torch(Path(run_dir) / "model.pt")
    model = build_model(ckpt["variant"], Model.model_validate(ckpt["model_config"]),
                        ckpt["vocab_size"])
    model.load_state_dict(ckpt["state_dict"])
    return model.eval(), ckpt


def validation_windows(corpus_dir: Path, context: int, max_tokens: int) -> dict[str, torch.Tensor]:
    return {s: eval_windows(load_torch(Path(corpus_dir) / f"{s}.pt"), context, max_tokens)
            for s in SPLITS}


def evaluate_stage(cfg, ctx) -> None:
    torch.set_num_threads(cfg.eval.threads)
    rows = []
    runs = ctx.inputs["train"]
    for i, key in enumerate(sorted(runs)):
        model, ckpt = load_trained(runs[key])
        windows = validation_windows(ctx.inputs["build_corpus"], model.shape.context,
                                     cfg.eval.max_tokens)
        row = {"variant": ckpt["variant"], "seed": ckpt["seed"]}
        for split, w in windows.items():
            row[f"{split}_loss"] = mean_loss(model, w, cfg.eval.batch_size)
            row[f"{split}_ppl"] = math.exp(row[f"{split}_loss"])
        rows.append(row)
        ctx.progress(i + 1, len(runs), f"evaluated {key}")
    write_table(ctx.out_dir / "evaluation.parquet",
                {k: [r[k] for r in rows] for k in rows[0]})
    metrics = {}
    for variant in sorted({r["variant"] for r in rows}):
        for split in SPLITS:
            vals = [r[f"{split}_loss"] for r in rows if r["variant"] == variant]
            metrics[f"{variant}/{split}_loss_mean"] = float(np.mean(vals))
    ctx.write_metrics(metrics)


# ---------------------------------------------------------------------------- routing
@torch.no_grad()
def routing_statistics(model: torch.nn.Module, windows: torch.Tensor) -> dict:
    """Expert load per layer and, for DAG-MoE, statistics of the learned edge gates."""
    model(windows[:, :-1])
    out: dict = {"layers": []}
    for layer in moe_layers(model):
        counts = torch.bincount(layer.stats["experts"].reshape(-1),
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
        gate = dag_round.last_edge_gates  # (T, K, K, g)
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
    batch = windows[:batch_size, :-1]
    model(batch)  # warm-up
    start = time.perf_counter()
    for _ in range(n_batches):
        model(batch)
    return n_batches * batch.numel() / (time.perf_counter() - start)


def analyze_routing_stage(cfg, ctx) -> None:
    torch.set_num_threads(cfg.eval.threads)
    runs = ctx.inputs["train"]
    report, throughput, step_time = {}, {}, {}
    for i, key in enumerate(sorted(runs)):
        model, ckpt = load_trained(runs[key])
        windows = validation_windows(ctx.inputs["build_corpus"], model.shape.context,
                                     cfg.eval.max_tokens)["val_id"]
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
