"""What the terminal shows while ``repro run`` works, and the summary at its end.

On a terminal: a live table (rich), one row per stage with its state, instances done / total,
elapsed time and an ETA from the stages' ``ctx.progress``. Elsewhere (CI, log files): the
driver's one-line-per-event messages only. Either way the run ends with a summary table and
the MLflow parent run id.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field

STATES = ("queued", "running", "done", "restored", "up to date", "failed", "skipped")


@dataclass
class _Instance:
    stage: str
    state: str = "queued"
    started: float | None = None
    ended: float | None = None
    fraction: float = 0.0


@dataclass
class RunDisplay:
    method: str
    instances: dict[str, _Instance] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _live: object = None

    @classmethod
    def for_plan(cls, plan) -> "RunDisplay":
        display = cls(plan.method.name)
        for inst in plan.work:
            display.instances[inst.name] = _Instance(inst.stage.name)
        return display

    def set(self, name: str, state: str) -> None:
        with self._lock:
            inst = self.instances.get(name)
            if inst is None:
                return
            inst.state = state
            now = time.monotonic()
            if state == "running" and inst.started is None:
                inst.started = now
            if state not in ("queued", "running"):
                inst.ended = now
                inst.fraction = 1.0 if state == "done" else inst.fraction

    def progress(self, name: str, done: int, total: int) -> None:
        with self._lock:
            inst = self.instances.get(name)
            if inst is not None:
                inst.fraction = done / max(total, 1)
                if inst.started is None:
                    inst.started, inst.state = time.monotonic(), "running"

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """``(stage, state, done/total, elapsed, eta)`` per stage, in declaration order."""
        by_stage: dict[str, list[_Instance]] = {}
        for inst in self.instances.values():
            by_stage.setdefault(inst.stage, []).append(inst)
        now = time.monotonic()
        out = []
        for stage, insts in by_stage.items():
            counts = {s: sum(1 for i in insts if i.state == s) for s in STATES}
            state = ", ".join(f"{n} {s}" if len(insts) > 1 else s for s, n in counts.items() if n)
            settled = sum(n for s, n in counts.items() if s not in ("queued", "running"))
            starts = [i.started for i in insts if i.started is not None]
            elapsed = (max((i.ended or now) for i in insts if i.started is not None) - min(starts)
                       if starts else 0.0)
            out.append((stage, state, f"{settled}/{len(insts)}", _seconds(elapsed) if starts else "",
                        _eta(insts, now)))
        return out

    def table(self):
        from rich.table import Table

        table = Table(title=f"repro run {self.method}  ({_seconds(time.monotonic() - self.started)})")
        for column in ("stage", "state", "done", "elapsed", "ETA"):
            table.add_column(column)
        for row in self.rows():
            table.add_row(*row)
        return table

    def __enter__(self) -> "RunDisplay":
        if sys.stdout.isatty():
            from rich.live import Live

            self._live = Live(get_renderable=self.table, refresh_per_second=2, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None


def _eta(insts: list[_Instance], now: float) -> str:
    """The slowest running instance's remaining time, from its progress so far."""
    remaining = [(now - i.started) * (1 - i.fraction) / i.fraction for i in insts
                 if i.state == "running" and i.started is not None and i.fraction > 0]
    return _seconds(max(remaining)) if remaining else ""


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.1f}min"


_CURRENT: RunDisplay | None = None


def current() -> RunDisplay | None:
    return _CURRENT


def activate(display: RunDisplay | None) -> None:
    global _CURRENT
    _CURRENT = display


def summary(outcome, plan, wall_s: float, tracking_uri: str | None = None) -> str:
    """The end-of-run table: per stage the instances run / restored / up to date / failed /
    not run and the stage's wall time, then the MLflow parent run id."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    groups = {"run": outcome.executed, "restored": outcome.restored, "up to date": outcome.up_to_date,
              "failed": outcome.failed, "not run": outcome.not_run}
    stage_of = {inst.name: inst.stage.name for inst in plan.method_instances}
    table = Table(title=f"{outcome.method}: summary ({_seconds(wall_s)} wall)")
    table.add_column("stage")
    for column in (*groups, "wall"):
        table.add_column(column, justify="right")
    walls = outcome.stage_walls if hasattr(outcome, "stage_walls") else {}
    for stage in dict.fromkeys(stage_of.values()):
        counts = [sum(1 for n in names if stage_of.get(n) == stage) for names in groups.values()]
        wall = walls.get(stage)
        table.add_row(stage, *[str(c) if c else "" for c in counts], _seconds(wall) if wall else "")
    buffer = StringIO()
    Console(file=buffer, width=100, force_terminal=False, color_system=None).print(table)
    text = buffer.getvalue()
    if outcome.parent_run_id:
        text += (f"MLflow parent run {outcome.parent_run_id} (experiment {outcome.method}; "
                 "`repro ui` to browse, `repro compare " + outcome.method + "` to compare)\n")
    return text
