"""``tune_alpha`` (scaling coefficient on validation) and ``evaluate`` (test accuracy, claims)."""
from __future__ import annotations

import statistics
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch

from components.circumerge.adapters import accuracy, load_backbone, load_task
from components.circumerge.merge import LABEL
from components.common.io import load_torch, read_json, write_json_atomic, write_table
from components.common.lora import apply_deltas
from components.common.metrics import summarize


def individual_accuracy(inputs: dict, tasks: list[str], split: str) -> dict[str, float]:
    """Each task's own fine-tuned accuracy: the denominator of normalised accuracy."""
    return {t: read_json(inputs[t] / "accuracy.json")[f"{split}_acc"] for t in tasks}


def merged_accuracies(net, records: dict, deltas: dict, alpha: float, split: str) -> dict[str, float]:
    # apply_deltas builds its new linears on the CPU in float32: put them where the backbone is
    ref = next(net.parameters())
    merged = apply_deltas(net, deltas, alpha).to(ref.device, ref.dtype)
    return {t: accuracy(merged, rec[split], rec["head"]) for t, rec in records.items()}


def normalised(acc: dict[str, float], individual: dict[str, float]) -> float:
    return 100.0 * statistics.mean(acc[t] / max(individual[t], 1e-9) for t in acc)


def _setup(cfg, ctx, split: str):
    tasks = list(cfg.data.tasks)
    individual = individual_accuracy(ctx.inputs["train_adapters"], tasks, split)
    keys = read_json(ctx.inputs["merge"] / "merges.json")["keys"]
    return individual, keys


# ----------------------------------------------------------------------------- scoring merges
# A unit of work is one merged model on some tasks: (merge key, alpha, tasks). tune_alpha scores
# 15 merges x 7 alphas, evaluate 15 merges x 4 tasks; in the small (MiniLM) profile the units are
# spread over one single-threaded process per core the stage was given (2 processes at 1 thread
# each use two cores better than one process at 2 threads on these small batches). Each unit
# computes exactly what the serial loop computes, so the results do not depend on the process
# count (tests/circumerge/test_circumerge_stages.py checks it bit for bit).
class _Scorer:
    def __init__(self, prep_dir: Path, merge_dir: Path, tasks: list[str]):
        _, self.net = load_backbone(prep_dir)
        self.records = {t: load_task(prep_dir, t) for t in tasks}
        self.merge_dir = Path(merge_dir)
        self._cached: tuple[str, dict] | None = None   # the last merge's deltas

    def deltas(self, key: str) -> dict:
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, load_torch(self.merge_dir / "merged" / f"{key}.pt")["deltas"])
        return self._cached[1]

    def __call__(self, unit: tuple[str, float, tuple[str, ...]], split: str) -> dict[str, float]:
        key, alpha, tasks = unit
        records = {t: self.records[t] for t in tasks}
        return merged_accuracies(self.net, records, self.deltas(key), alpha, split)


_WORKER_SCORER: _Scorer | None = None


def _start_worker(prep_dir: Path, merge_dir: Path, tasks: list[str]) -> None:
    global _WORKER_SCORER
    torch.set_num_threads(1)
    _WORKER_SCORER = _Scorer(prep_dir, merge_dir, tasks)


def _score_in_worker(unit: tuple, split: str) -> dict[str, float]:
    return _WORKER_SCORER(unit, split)


def score_merges(ctx, kind: str, tasks: list[str], units: list[tuple], split: str,
                 processes: int | None = None):
    """Accuracies of every unit ``(key, alpha, tasks)``, yielded in the order of ``units``.
    ``processes``: by default one per thread the stage was given for MiniLM, and 1 (this process)
    otherwise: the smoke digits MLP is too small to pay for starting processes, and CLIP decodes
    its images lazily and may sit on a GPU."""
    if processes is None:
        processes = torch.get_num_threads() if kind == "minilm" else 1
    processes = max(1, min(processes, len(units)))
    prep, merge_dir = ctx.inputs["prepare_tasks"], ctx.inputs["merge"]
    if processes == 1:
        scorer = _Scorer(prep, merge_dir, tasks)
        yield from (scorer(unit, split) for unit in units)
        return
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn"), initializer=_start_worker,
                             initargs=(prep, merge_dir, tasks)) as pool:
        yield from pool.map(_score_in_worker, units, [split] * len(units))


def tune_alpha_stage(cfg, ctx) -> None:
    individual, keys = _setup(cfg, ctx, "val")
    tasks, grid = list(cfg.data.tasks), list(cfg.tune.alphas)
    units = [(key, alpha, tuple(tasks)) for key in keys for alpha in grid]
    scored = score_merges(ctx, cfg.data.kind, tasks, units, "val")
    chosen, rows = {}, {"key": [], "alpha": [], "val_normalised_acc": []}
    for i, key in enumerate(keys):
        scores = {}
        for alpha in grid:
            scores[alpha] = normalised(next(scored), individual)
            rows["key"].append(key), rows["alpha"].append(alpha), rows["val_normalised_acc"].append(scores[alpha])
        chosen[key] = max(scores, key=scores.get)  # ties go to the first (smallest) alpha of the grid
        ctx.progress(i + 1, len(keys), f"{key}: alpha={chosen[key]}")
    scored.close()
    write_table(ctx.out_dir / "alpha_search.parquet", rows)
    write_json_atomic(ctx.out_dir / "alphas.json", chosen)
    best_val = {k: max(v for kk, v in zip(rows["key"], rows["val_normalised_acc"]) if kk == k) for k in chosen}
    ctx.write_metrics({f"alpha/{k}": a for k, a in chosen.items()}
                      | {f"val_normalised_acc/{k}": v for k, v in best_val.items()}
                      | {"n_alpha_at_edge": alphas_at_edge(chosen, cfg.tune.alphas)})


def alphas_at_edge(chosen: dict[str, float], grid: list[float]) -> int:
    """How many merges chose the smallest or largest alpha of the grid (the grid may be too narrow)."""
    return sum(a in (min(grid), max(grid)) for a in chosen.values())


def _group(space: str, rule: str) -> str:
    return f"{space}-{rule}"


def accuracy_verdicts(table: dict, rules: list[str], margin: float, gated: list[str]) -> dict:
    """CircuMerge (mean over seeds) >= Core Space - margin, for each rule; only the ``gated`` rules
    get a pass flag (TA is exact in any sketched space, so it is reported only)."""
    out = {}
    for rule in rules:
        core = [a for s, r, a in zip(table["space"], table["rule"], table["normalised_acc"]) if (s, r) == ("core", rule)]
        circ = [a for s, r, a in zip(table["space"], table["rule"], table["normalised_acc"]) if (s, r) == ("circumerge", rule)]
        if not core or not circ:
            continue
        out[rule] = {"core": core[0], "circumerge_mean": statistics.mean(circ), "circumerge_seeds": circ,
                     "gap": statistics.mean(circ) - core[0], "gated": rule in gated}
        if rule in gated:
            out[rule]["pass"] = statistics.mean(circ) >= core[0] - margin
    return out


def evaluate_stage(cfg, ctx) -> None:
    individual, keys = _setup(cfg, ctx, "test")
    tasks = list(cfg.data.tasks)
    alphas = read_json(ctx.inputs["tune_alpha"] / "alphas.json")
    merges = {k: v for k, v in zip(*_merge_columns(ctx))}
    table = {k: [] for k in ("key", "space", "rule", "seed", "alpha", "normalised_acc", "mean_acc",
                             "merge_time_s", "erank_merged")}
    per_task = {"key": [], "task": [], "acc": [], "individual_acc": []}
    units = [(key, alphas[key], (t,)) for key in keys for t in tasks]
    scored = score_merges(ctx, cfg.data.kind, tasks, units, "test")
    for i, key in enumerate(keys):
        meta = merges[key]
        acc = {t: next(scored)[t] for t in tasks}
        for t, a in acc.items():
            per_task["key"].append(key), per_task["task"].append(t)
            per_task["acc"].append(a), per_task["individual_acc"].append(individual[t])
        row = {"key": key, "space": meta["space"], "rule": meta["rule"],
               "seed": meta["seed"], "alpha": alphas[key],
               "normalised_acc": normalised(acc, individual), "mean_acc": statistics.mean(acc.values()),
               "merge_time_s": meta["merge_time_s"], "erank_merged": meta["erank_merged"]}
        for k, v in row.items():
            table[k].append(v)
        ctx.progress(i + 1, len(keys), f"{key}: {row['normalised_acc']:.1f}")
    scored.close()
    write_table(ctx.out_dir / "results.parquet", table)
    write_table(ctx.out_dir / "per_task.parquet", per_task)
    verdicts = {"label": LABEL,
                "accuracy": accuracy_verdicts(table, list(cfg.merge.rules), cfg.claims.accuracy_margin,
                                              list(cfg.claims.gated_rules)),
                "timing": timing_verdicts(read_json(ctx.inputs["timing_benchmark"] / "timing.json"),
                                          cfg.claims.time_ratio, cfg.claims.fidelity,
                                          list(cfg.claims.gated_rules)),
                "individual_test_acc": individual}
    write_json_atomic(ctx.out_dir / "claims.json", verdicts)
    ctx.write_metrics(_summary_metrics(table, verdicts))


def _merge_columns(ctx):
    from components.common.io import read_table

    merges = read_table(ctx.inputs["merge"] / "merges.parquet").to_pylist()
    return [m["key"] for m in merges], merges


def timing_verdicts(timing: dict, ratio: float, fidelity: float, gated: list[str]) -> dict:
    """At 4096-wide shapes: CircuMerge / faster Core Space median time <= ratio at every thread
    count (every rule), and relative merge error vs Core Space <= fidelity (the ``gated`` rules;
    TA's error is reported only, it is exact by construction)."""
    out = {}
    for rule, f in timing["fidelity"].items():
        out[rule] = {"fidelity": f["circumerge_vs_core"]}
        if rule in gated:
            out[rule]["pass_fidelity"] = f["circumerge_vs_core"] <= fidelity
        for n, table in timing["threads"].items():
            out[rule][f"ratio_t{n}"] = table[rule]["ratio"]
            out[rule][f"pass_time_t{n}"] = table[rule]["ratio"] <= ratio
    return out


def _summary_metrics(table: dict, verdicts: dict) -> dict:
    out = {}
    groups: dict[str, list[float]] = {}
    for s, r, a in zip(table["space"], table["rule"], table["normalised_acc"]):
        groups.setdefault(_group(s, r), []).append(a)
    for g, vals in groups.items():
        out[f"normalised_acc/{g}"] = summarize(vals)["mean"]
    for rule, v in verdicts["accuracy"].items():
        out[f"acc_gap/{rule}"] = v["gap"]
        if "pass" in v:
            out[f"pass_accuracy/{rule}"] = bool(v["pass"])
    for rule, v in verdicts["timing"].items():
        out[f"fidelity/{rule}"] = v["fidelity"]
        if "pass_fidelity" in v:
            out[f"pass_fidelity/{rule}"] = bool(v["pass_fidelity"])
        for key, value in v.items():
            if key.startswith("ratio_t"):
                out[f"time_ratio/{rule}/{key.removeprefix('ratio_')}"] = value
            elif key.startswith("pass_time_t"):
                out[f"pass_timing/{rule}/{key.removeprefix('pass_time_')}"] = bool(value)
    return out
