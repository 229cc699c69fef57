"""The ``merge`` stage: every rule in every space, with merge times and effective ranks."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from components.circumerge.sketch import circumerge
from components.common.io import load_torch, save_torch, write_json_atomic, write_table
from components.common.merging import effective_rank, merge_core, merge_full, merge_rule

LABEL = "CircuMerge (our instantiation)"


def rule_for(name: str, merge_cfg) -> Callable[[torch.Tensor], torch.Tensor]:
    knobs = {"ties": {"density": merge_cfg.ties_density},
             "tsv": {"fraction": merge_cfg.tsv_fraction}}.get(name, {})
    return merge_rule(name, **knobs)


def merge_one(factors, space: str, rule, seed: int | None, merge_cfg):
    """One layer: ``(dense merged delta, merged core or None, task cores or None, adapter or None)``."""
    if space == "full":
        return merge_full(factors, rule), None, None, None
    if space == "core":
        adapter, cores, merged = merge_core(factors, rule, merge_cfg.target_rank, return_cores=True)
    elif space == "circumerge":
        adapter, cores, merged = circumerge(factors, rule, seed, merge_cfg.sketch_factor,
                                            merge_cfg.target_rank, return_cores=True)
    else:
        raise ValueError(f"unknown space {space!r} (full, core, circumerge)")
    return adapter[0] @ adapter[1], merged, cores, adapter


def merge_all_layers(adapters: dict, layers: list[str], space: str, rule, seed, merge_cfg) -> dict:
    return {layer: merge_one([adapters[t][layer] for t in adapters], space, rule, seed, merge_cfg)
            for layer in layers}


def timed_merge(adapters, layers, space, rule, seed, merge_cfg) -> tuple[dict, float]:
    """Merge all layers ``repeats`` times; wall time is the median (first call kept: tiny shapes)."""
    times = []
    for _ in range(max(1, merge_cfg.repeats)):
        start = time.perf_counter()
        out = merge_all_layers(adapters, layers, space, rule, seed, merge_cfg)
        times.append(time.perf_counter() - start)
    return out, statistics.median(times)


def load_adapters(inputs: dict, tasks: list[str]) -> tuple[dict, list[str]]:
    """``{task: {layer: (B_eff, A)}}`` in task order, and the adapted layer names."""
    adapters, layers = {}, None
    for task in tasks:
        saved = load_torch(inputs[task] / "adapter.pt")
        adapters[task] = {name: (f["B"], f["A"]) for name, f in saved["factors"].items()}
        layers = saved["layers"]
    return adapters, layers


def merge_keys(merge_cfg, seeds: list[int]) -> list[tuple[str, str, int | None]]:
    """(space, rule, seed); only CircuMerge is random, so only it repeats over seeds."""
    return [(space, rule, seed) for space in merge_cfg.spaces for rule in merge_cfg.rules
            for seed in (seeds if space == "circumerge" else [None])]


def key_name(space: str, rule: str, seed: int | None) -> str:
    return f"{space}-{rule}" + ("" if seed is None else f"-{seed}")


def merge_stage(cfg, ctx) -> None:
    adapters, layers = load_adapters(ctx.inputs["train_adapters"], list(cfg.data.tasks))
    rows = {k: [] for k in ("key", "space", "rule", "seed", "merge_time_s", "erank_merged",
                            "erank_task_mean", "adapter_rank", "rel_err_vs_core")}
    reference = {}
    keys = merge_keys(cfg.merge, list(cfg.seeds))
    for i, (space, rule_name, seed) in enumerate(keys):
        merged, seconds = timed_merge(adapters, layers, space, rule_for(rule_name, cfg.merge), seed, cfg.merge)
        deltas = {layer: out[0] for layer, out in merged.items()}
        if space == "core":
            reference[rule_name] = deltas
        erank_task = [effective_rank(c) for out in merged.values() if out[2] is not None for c in out[2]]
        name = key_name(space, rule_name, seed)
        save_torch(ctx.out_dir / "merged" / f"{name}.pt", {
            "space": space, "rule": rule_name, "seed": seed, "deltas": deltas,
            "adapters": {layer: out[3] for layer, out in merged.items() if out[3] is not None}})
        ref = reference.get(rule_name)
        rel_err = (sum(float((deltas[l] - ref[l]).norm() ** 2) for l in layers) /
                   sum(float(ref[l].norm() ** 2) for l in layers)) ** 0.5 if ref else float("nan")
        for k, v in (("key", name), ("space", space), ("rule", rule_name), ("seed", -1 if seed is None else seed),
                     ("merge_time_s", seconds),
                     ("erank_merged", statistics.mean(effective_rank(d) for d in deltas.values())),
                     ("erank_task_mean", statistics.mean(erank_task) if erank_task else float("nan")),
                     ("adapter_rank", max((out[3][0].shape[1] for out in merged.values() if out[3]), default=-1)),
                     ("rel_err_vs_core", rel_err)):
            rows[k].append(v)
        ctx.log_metric(f"merge_time_s/{name}", seconds)
        ctx.progress(i + 1, len(keys), f"merged {name}")
    write_table(ctx.out_dir / "merges.parquet", rows)
    write_json_atomic(ctx.out_dir / "merges.json", {"label": LABEL, "keys": rows["key"]})
    ctx.write_metrics({f"merge_time_s/{k}": t for k, t in zip(rows["key"], rows["merge_time_s"])}
                      | {f"erank/{k}": e for k, e in zip(rows["key"], rows["erank_merged"])}
                      | {f"rel_err_vs_core/{k}": e for k, e in zip(rows["key"], rows["rel_err_vs_core"])
                         if k.startswith("circumerge")})
