"""``timing_benchmark``: merge wall time at real layer shapes on synthetic LoRA factors.

Both methods get the same factors, thread count and warm-up; each repeat merges all
``n_matrices`` layers and the median repeat is reported. Only compute is timed (factors are
built before the clock starts, nothing is written inside the timed region). Every step of each
method counts: Core Space's SVDs and projections; CircuMerge's FFTs, sampling and small SVDs.
"Core Space (QR bases)" is timed too as a cheaper variant of the baseline; it is reported, not
gated (the paper's baseline uses SVD bases).
"""
from __future__ import annotations

import statistics
import time

import torch

from components.circumerge.merge import LABEL, rule_for
from components.circumerge.sketch import circumerge
from components.common.io import write_json_atomic
from components.common.merging import merge_core


def synthetic_factors(t: int, m: int, n: int, r: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(m, r, generator=gen) / r ** 0.5, torch.randn(r, n, generator=gen) / n ** 0.5)
            for _ in range(t)]


def median_time(fn, layers, repeats: int) -> tuple[float, list[float]]:
    fn(layers[0])  # warm-up: allocator, FFT plans, BLAS threads
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for factors in layers:
            fn(factors)
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def timing_benchmark_stage(cfg, ctx) -> None:
    previous = torch.get_num_threads()
    torch.set_num_threads(cfg.timing.threads)  # same thread count for every method
    try:
        _benchmark(cfg, ctx)
    finally:
        torch.set_num_threads(previous)  # stages may share a process: leave it as found


def _benchmark(cfg, ctx) -> None:
    tc, mc = cfg.timing, cfg.merge
    layers = [synthetic_factors(tc.n_tasks, tc.dim, tc.dim, tc.rank, seed=i) for i in range(tc.n_matrices)]
    methods = {
        "core": lambda rule: (lambda f: merge_core(f, rule, mc.target_rank)),
        "core_qr": lambda rule: (lambda f: merge_core(f, rule, mc.target_rank, basis="qr")),
        "circumerge": lambda rule: (lambda f: circumerge(f, rule, 0, mc.sketch_factor, mc.target_rank)),
    }
    result = {"label": LABEL, "shape": {"m": tc.dim, "n": tc.dim, "T": tc.n_tasks, "r": tc.rank,
                                        "matrices": tc.n_matrices, "threads": torch.get_num_threads()},
              "rules": {}}
    steps = len(tc.rules) * len(methods)
    for i, rule_name in enumerate(tc.rules):
        rule = rule_for(rule_name, mc)
        medians = {}
        for j, (name, make) in enumerate(methods.items()):
            medians[name], runs = median_time(make(rule), layers, tc.repeats)
            result.setdefault("runs", {})[f"{name}-{rule_name}"] = runs
            ctx.progress(i * len(methods) + j + 1, steps, f"{name}-{rule_name}: {medians[name]:.3f}s")
        result["rules"][rule_name] = {"core_s": medians["core"], "core_qr_s": medians["core_qr"],
                                      "circumerge_s": medians["circumerge"],
                                      "ratio": medians["circumerge"] / medians["core"],
                                      "ratio_vs_qr": medians["circumerge"] / medians["core_qr"]}
    write_json_atomic(ctx.out_dir / "timing.json", result)
    ctx.write_metrics({f"time_ratio/{r}": v["ratio"] for r, v in result["rules"].items()}
                      | {f"circumerge_s/{r}": v["circumerge_s"] for r, v in result["rules"].items()}
                      | {f"core_s/{r}": v["core_s"] for r, v in result["rules"].items()})
