"""What a stage function receives besides its params.

Stage functions are plain Python: ``def train(cfg, ctx) -> None``. They read inputs from
``ctx.inputs`` and write everything into ``ctx.out_dir``; the runtime (flows/runtime) decides
when they run, versions what they wrote and records what they logged. This module only
describes the interface, so components stay free of orchestration imports.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol


class StageContext(Protocol):
    inputs: dict[str, Any]
    """Upstream outputs by stage name. A plain stage maps to its output folder (Path);
    a fan-out stage maps to ``{item_key: Path}`` for the items of the current config."""
    out_dir: Path
    """Where this stage writes. It is a temporary folder that the runtime renames into
    place only when the stage returns, so a crash never leaves a half-written output."""
    item: dict[str, Any]
    """For a fan-out stage, this instance's values (e.g. ``{"variant": "alf", "seed": 1}``);
    empty otherwise."""

    def log_metric(self, name: str, value: float, step: int | None = None) -> None:
        """A scalar for the MLflow child run; with ``step`` it becomes a curve."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        """The stage's summary metrics: written to the DVC metrics file and logged to MLflow."""

    def log_artifact(self, path: Path) -> None:
        """A file (plot, table) to attach to the MLflow child run."""

    def progress(self, done: int, total: int, message: str = "") -> None:
        """Report progress of long work (shown in the log and as a Prefect progress artifact)."""


@dataclass
class LocalContext:
    """A plain in-memory context for unit tests and notebooks: records what a stage logs."""

    out_dir: Path
    inputs: dict[str, Any] = field(default_factory=dict)
    item: dict[str, Any] = field(default_factory=dict)
    metrics_path: Path | None = None
    on_progress: Callable[[int, int, str], None] | None = None
    history: list[tuple[str, float, int | None, float]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def log_metric(self, name: str, value: float, step: int | None = None) -> None:
        self.history.append((name, float(value), step, time.time()))

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        for name, value in metrics.items():
            self.log_metric(name, value, step)

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        self.summary.update(metrics)
        if self.metrics_path is not None:
            from components.common.io import write_json_atomic

            write_json_atomic(self.metrics_path, self.summary)

    def log_artifact(self, path: Path) -> None:
        self.artifacts.append(Path(path))

    def progress(self, done: int, total: int, message: str = "") -> None:
        if self.on_progress is not None:
            self.on_progress(done, total, message)
