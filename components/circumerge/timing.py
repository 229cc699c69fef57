"""``timing_benchmark``: merge fidelity and wall time at real layer shapes on synthetic factors.

Shapes are the paper's (m = n = 4096, T = 8, r = 16). Two things are measured there:

- **Fidelity**: ``||dCircuMerge - dCore|| / ||dCore||`` (Frobenius, over all timed matrices) for
  every rule, against Core Space with SVD bases (the paper's baseline). TA is exact in any
  sketched space by construction (reported); TIES and TSV are where the sketch can lose.
- **Time**: every method gets the same factors, thread count and warm-up; each repeat merges all
  ``n_matrices`` layers and the median repeat is reported, for every thread count in
  ``timing.threads``. The baseline is the *faster* of Core Space with SVD bases and with QR bases
  (QR gives the same spans more cheaply). Only compute is timed; every step of each method counts.
"""
from __future__ import annotations

import statistics
import time

import torch

from components.circumerge.merge import LABEL, rule_for
from components.circumerge.sketch import circumerge, sketch_size
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


def merge_methods(mc, seed: int) -> dict:
    """name -> (rule -> (factors -> (B*, A*)))."""
    return {
        "core": lambda rule: (lambda f: merge_core(f, rule, mc.target_rank)),
        "core_qr": lambda rule: (lambda f: merge_core(f, rule, mc.target_rank, basis="qr")),
        "circumerge": lambda rule: (lambda f: circumerge(f, rule, seed, mc.sketch_factor, mc.target_rank)),
    }


def relative_error(layers, method, reference) -> float:
    """``||sum of (dMethod - dRef)||_F / ||dRef||_F`` over all layers."""
    num = den = 0.0
    for factors in layers:
        b, a = method(factors)
        b_ref, a_ref = reference(factors)
        ref = b_ref.double() @ a_ref.double()
        num += float((b.double() @ a.double() - ref).norm() ** 2)
        den += float(ref.norm() ** 2)
    return (num / den) ** 0.5


def fidelity(layers, rules: list[str], mc, seed: int) -> dict[str, dict[str, float]]:
    """CircuMerge (and Core Space QR) against Core Space SVD, per rule."""
    methods = merge_methods(mc, seed)
    out = {}
    for rule_name in rules:
        rule = rule_for(rule_name, mc)
        ref = methods["core"](rule)
        out[rule_name] = {"circumerge_vs_core": relative_error(layers, methods["circumerge"](rule), ref),
                          "core_qr_vs_core": relative_error(layers, methods["core_qr"](rule), ref)}
    return out


def time_rules(layers, rules: list[str], mc, repeats: int, seed: int, ctx, tag: str) -> tuple[dict, dict]:
    methods = merge_methods(mc, seed)
    table, runs = {}, {}
    for i, rule_name in enumerate(rules):
        rule = rule_for(rule_name, mc)
        medians = {}
        for name, make in methods.items():
            medians[name], runs[f"{name}-{rule_name}-{tag}"] = median_time(make(rule), layers, repeats)
        ctx.progress(i + 1, len(rules), f"{tag} {rule_name}: " +
                     ", ".join(f"{k} {v:.3f}s" for k, v in medians.items()))
        best = min(medians["core"], medians["core_qr"])
        table[rule_name] = {"core_s": medians["core"], "core_qr_s": medians["core_qr"],
                            "circumerge_s": medians["circumerge"], "best_core_s": best,
                            "ratio": medians["circumerge"] / best,
                            "ratio_vs_svd": medians["circumerge"] / medians["core"],
                            "ratio_vs_qr": medians["circumerge"] / medians["core_qr"]}
    return table, runs


def with_threads(n: int, fn):
    previous = torch.get_num_threads()
    torch.set_num_threads(n)  # same thread count for every method
    try:
        return fn()
    finally:
        torch.set_num_threads(previous)  # leave the process as found


def timing_benchmark_stage(cfg, ctx) -> None:
    tc, mc = cfg.timing, cfg.merge
    layers = [synthetic_factors(tc.n_tasks, tc.dim, tc.dim, tc.rank, seed=tc.factor_seed + i)
              for i in range(tc.n_matrices)]
    tr = tc.n_tasks * tc.rank
    result = {"label": LABEL, "shape": {"m": tc.dim, "n": tc.dim, "T": tc.n_tasks, "r": tc.rank,
                                        "matrices": tc.n_matrices, "repeats": tc.repeats,
                                        "sketch_rows": sketch_size(tc.dim, tr, mc.sketch_factor)},
              "fidelity": fidelity(layers, list(tc.rules), mc, tc.sketch_seed), "threads": {}, "runs": {}}
    for n in tc.threads:
        table, runs = with_threads(n, lambda: time_rules(layers, list(tc.rules), mc, tc.repeats,
                                                         tc.sketch_seed, ctx, f"t{n}"))
        result["threads"][str(n)] = table
        result["runs"].update(runs)
    write_json_atomic(ctx.out_dir / "timing.json", result)
    ctx.write_metrics(timing_metrics(result))


def timing_metrics(result: dict) -> dict:
    out = {"sketch_fraction": result["shape"]["sketch_rows"] / result["shape"]["m"]}
    for rule, f in result["fidelity"].items():
        out[f"fidelity/{rule}"] = f["circumerge_vs_core"]
        out[f"fidelity_qr/{rule}"] = f["core_qr_vs_core"]
    for n, table in result["threads"].items():
        for rule, row in table.items():
            for key in ("ratio", "ratio_vs_svd", "ratio_vs_qr", "circumerge_s", "core_s", "core_qr_s"):
                out[f"{key}/{rule}/t{n}"] = row[key]
    return out
