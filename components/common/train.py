"""The one supervised training loop that methods share (do not copy it per method).

``fit`` runs a fixed number of optimisation steps over an endless stream of batches, logs
the loss as a curve, reports progress, and optionally evaluates every ``eval_every`` steps.
Anything method-specific goes into ``loss_fn`` (and, if needed, a custom optimizer).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import torch


def infinite(batches: Callable[[], Iterable[Any]]) -> Iterator[Any]:
    """Cycle over a re-iterable source (e.g. a DataLoader) forever."""
    while True:
        yield from batches()


def make_optimizer(params, name: str = "adamw", lr: float = 1e-3, weight_decay: float = 0.0,
                   **kwargs) -> torch.optim.Optimizer:
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **kwargs)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, **kwargs)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay,
                               momentum=kwargs.pop("momentum", 0.9), **kwargs)
    raise ValueError(f"unknown optimizer {name!r} (adamw, adam, sgd)")


def cosine_warmup(optimizer: torch.optim.Optimizer, steps: int, warmup: int = 0):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1 + torch.cos(torch.tensor(progress * torch.pi)).item())

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def fit(
    model: torch.nn.Module,
    batches: Iterator[Any],
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
    *,
    steps: int,
    optimizer: torch.optim.Optimizer | None = None,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    warmup: int = 0,
    schedule: str = "cosine",
    grad_clip: float | None = 1.0,
    ctx: Any = None,
    log_every: int = 10,
    eval_fn: Callable[[torch.nn.Module], dict[str, float]] | None = None,
    eval_every: int = 0,
    prefix: str = "train",
) -> list[dict[str, float]]:
    """Train ``model`` for ``steps`` steps; returns the logged records (loss and evals).

    ``ctx`` is the stage context (may be None in unit tests): losses go to
    ``ctx.log_metric(f"{prefix}/loss", ..., step)`` and progress to ``ctx.progress``.
    """
    optimizer = optimizer or make_optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = cosine_warmup(optimizer, steps, warmup) if schedule == "cosine" else None
    records: list[dict[str, float]] = []
    running, count = 0.0, 0
    model.train()
    for step in range(1, steps + 1):
        loss = loss_fn(model, next(batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        running, count = running + loss.item(), count + 1
        if step % log_every == 0 or step == steps:
            record = {"step": step, f"{prefix}/loss": running / count}
            running, count = 0.0, 0
            if eval_fn is not None and eval_every and (step % eval_every == 0 or step == steps):
                model.eval()
                with torch.no_grad():
                    record.update(eval_fn(model))
                model.train()
            records.append(record)
            if ctx is not None:
                ctx.log_metrics({k: v for k, v in record.items() if k != "step"}, step=step)
                ctx.progress(step, steps, f"{prefix} loss {record[f'{prefix}/loss']:.4f}")
    model.eval()
    return records
