"""memory_profile stage: exact state/gradient bytes, measured step peak, step-time ratios.

Exact numbers are counted from the tensors themselves. The peak of a training step is measured:
on CPU, the torch profiler records every allocation and free inside one steady-state step
(zero_grad -> forward -> backward -> step); the running sum of those gives the transient peak,
which is added to the bytes alive when the step starts (parameters, optimizer state, batch).
On CUDA, torch.cuda.max_memory_allocated gives the same total directly. tracemalloc is not used:
it does not see torch's allocator.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from components.common.io import write_table
from components.common.seeds import seed_everything
from components.ioadam import tasks
from components.ioadam.optim import (build_optimizer, formula_state_bytes, grad_bytes, linear_weights,
                                     relative_saving, state_bytes)
from components.ioadam.training import build_lm, device_of, lm_vocab_size

WARMUP_STEPS = 2   # optimizer state exists from step 1; measure a steady-state step after that


@dataclass
class Setup:
    task: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch: Any
    loss_fn: Callable


def make_setup(task: str, name: str, cfg) -> Setup:
    """A model, its optimizer and one synthetic batch of the training shape for ``task``."""
    seed_everything(0)
    dev = device_of(cfg.device)
    mode = "reference" if name.endswith("_ref") else "fused"
    opt_name = name.removesuffix("_ref")
    if task == "digits":
        d = cfg.digits
        model = tasks.MLP(d.sizes).to(dev)
        batch = (torch.randn(d.batch_size, d.sizes[0], device=dev),
                 torch.randint(0, d.sizes[-1], (d.batch_size,), device=dev))
        loss_fn = tasks.classify_loss
    else:
        c = cfg.charlm
        model = build_lm(c).to(dev)
        batch = torch.randint(0, lm_vocab_size(c), (c.batch_size, c.seq_len + 1), device=dev)
        loss_fn = tasks.lm_loss
    return Setup(task, model, build_optimizer(opt_name, model, lr=1e-4, mode=mode), batch, loss_fn)


def train_step(s: Setup) -> None:
    s.optimizer.zero_grad(set_to_none=True)
    s.loss_fn(s.model, s.batch).backward()
    s.optimizer.step()


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def grad_bytes_after_backward(s: Setup) -> int:
    """Weight/bias gradient buffers that exist once backward has run (fused IO-Adam: biases only)."""
    s.optimizer.zero_grad(set_to_none=True)
    s.loss_fn(s.model, s.batch).backward()
    return grad_bytes(s.model)


def cpu_transient_peak(fn: Callable[[], None]) -> int:
    """Highest net bytes allocated by torch while ``fn`` runs (relative to its start)."""
    from torch.profiler import ProfilerActivity, profile
    from torch._C._profiler import _EventType

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation:
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
    live = peak = 0
    for _, size in sorted(events):
        live += size
        peak = max(peak, live)
    return peak


def step_peak_bytes(s: Setup) -> dict[str, int]:
    s.optimizer.zero_grad(set_to_none=True)   # grads of the previous step are freed first
    persistent = (tensor_bytes(s.model.parameters()) + state_bytes(s.optimizer)
                  + tensor_bytes(s.batch if isinstance(s.batch, tuple) else (s.batch,)))
    if s.batch[0].is_cuda if isinstance(s.batch, tuple) else s.batch.is_cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        train_step(s)
        torch.cuda.synchronize()
        total = torch.cuda.max_memory_allocated()
        return {"persistent_bytes": persistent, "transient_peak_bytes": total - persistent,
                "total_peak_bytes": total}
    transient = cpu_transient_peak(lambda: train_step(s))
    return {"persistent_bytes": persistent, "transient_peak_bytes": transient,
            "total_peak_bytes": persistent + transient}


def median_step_seconds(setups: list[Setup], reps: int) -> list[float]:
    """Round-robin timing, so that machine load hits every optimizer alike."""
    times: list[list[float]] = [[] for _ in setups]
    for _ in range(reps):
        for i, s in enumerate(setups):
            start = time.perf_counter()
            train_step(s)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def profile_task(task: str, cfg) -> list[dict[str, Any]]:
    names = list(cfg.memory.optimizers)
    setups = [make_setup(task, name, cfg) for name in names]
    for s in setups:
        for _ in range(WARMUP_STEPS):
            train_step(s)
    step_s = median_step_seconds(setups, cfg.memory.timed_steps)
    adam_s = step_s[names.index("adam")] if "adam" in names else float("nan")
    rows = []
    for name, s, secs in zip(names, setups, step_s):
        shapes = [tuple(w.shape) for w in linear_weights(s.model)]
        row = {"task": task, "optimizer": name,
               "param_bytes": tensor_bytes(s.model.parameters()),
               "state_bytes_matrix": state_bytes(s.optimizer, linear_weights(s.model)),
               "formula_state_bytes_matrix": formula_state_bytes(name.removesuffix("_ref"), shapes),
               "state_bytes_total": state_bytes(s.optimizer),
               "grad_bytes": grad_bytes_after_backward(s),
               **step_peak_bytes(s),
               "step_time_ratio_vs_adam": secs / adam_s, "timed_repeats": cfg.memory.timed_steps}
        rows.append(row)
    adam = next((r for r in rows if r["optimizer"] == "adam"), None)
    for row in rows:
        for key in ("state_bytes_matrix", "total_peak_bytes"):
            row[f"{key}_saving_vs_adam"] = relative_saving(row[key], adam[key]) if adam else float("nan")
    return rows


def memory_profile_stage(cfg, ctx) -> None:
    torch.set_num_threads(cfg.device.threads)
    rows = []
    for i, task in enumerate(("digits", "charlm")):
        rows += profile_task(task, cfg)
        ctx.progress(i + 1, 2, f"profiled {task}")
    write_table(ctx.out_dir / "memory.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    ctx.write_metrics({f"{r['task']}/{r['optimizer']}/{k}": r[k] for r in rows
                       for k in ("state_bytes_matrix", "total_peak_bytes", "total_peak_bytes_saving_vs_adam",
                                 "step_time_ratio_vs_adam")} | {"timed_repeats": cfg.memory.timed_steps})
