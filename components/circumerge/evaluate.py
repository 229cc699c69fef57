"""``tune_alpha`` (scaling coefficient on validation) and ``evaluate`` (test accuracy, claims)."""
from __future__ import annotations

import statistics

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
    prep = ctx.inputs["prepare_tasks"]
    _, net = load_backbone(prep)
    records = {t: load_task(prep, t) for t in tasks}
    individual = individual_accuracy(ctx.inputs["train_adapters"], tasks, split)
    keys = read_json(ctx.inputs["merge"] / "merges.json")["keys"]
    return net, records, individual, keys


def _deltas(ctx, key: str) -> dict:
    return load_torch(ctx.inputs["merge"] / "merged" / f"{key}.pt")["deltas"]


def tune_alpha_stage(cfg, ctx) -> None:
    net, records, individual, keys = _setup(cfg, ctx, "val")
    chosen, rows = {}, {"key": [], "alpha": [], "val_normalised_acc": []}
    for i, key in enumerate(keys):
        deltas = _deltas(ctx, key)
        scores = {}
        for alpha in cfg.tune.alphas:
            scores[alpha] = normalised(merged_accuracies(net, records, deltas, alpha, "val"), individual)
            rows["key"].append(key), rows["alpha"].append(alpha), rows["val_normalised_acc"].append(scores[alpha])
        chosen[key] = max(scores, key=scores.get)  # ties go to the first (smallest) alpha of the grid
        ctx.progress(i + 1, len(keys), f"{key}: alpha={chosen[key]}")
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
    net, records, individual, keys = _setup(cfg, ctx, "test")
    alphas = read_json(ctx.inputs["tune_alpha"] / "alphas.json")
    merges = {k: v for k, v in zip(*_merge_columns(ctx))}
    table = {k: [] for k in ("key", "space", "rule", "seed", "alpha", "normalised_acc", "mean_acc",
                             "merge_time_s", "erank_merged")}
    per_task = {"key": [], "task": [], "acc": [], "individual_acc": []}
    for i, key in enumerate(keys):
        meta = load_torch(ctx.inputs["merge"] / "merged" / f"{key}.pt")
        acc = merged_accuracies(net, records, meta["deltas"], alphas[key], "test")
        for t, a in acc.items():
            per_task["key"].append(key), per_task["task"].append(t)
            per_task["acc"].append(a), per_task["individual_acc"].append(individual[t])
        row = {"key": key, "space": meta["space"], "rule": meta["rule"],
               "seed": -1 if meta["seed"] is None else meta["seed"], "alpha": alphas[key],
               "normalised_acc": normalised(acc, individual), "mean_acc": statistics.mean(acc.values()),
               "merge_time_s": merges[key]["merge_time_s"], "erank_merged": merges[key]["erank_merged"]}
        for k, v in row.items():
            table[k].append(v)
        ctx.progress(i + 1, len(keys), f"{key}: {row['normalised_acc']:.1f}")
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
