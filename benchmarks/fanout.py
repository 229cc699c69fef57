"""One fan-out stage three ways on this machine: sequential `repro exec` per item, the thread
executor, and Ray (in-process local cluster). For the two executors: the whole invocation, and
the stage alone (its child runs' span in MLflow). Speed-up = sequential / wall."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from _common import BIN, newest_run_tree, timed

from flows.cli import parse_overrides
from flows.runtime import runner
from flows.runtime.project import Project
from flows.runtime.testing import run_in_temp_project


def main(method: str = "linrnn", stage: str = "train_ringworld", profile: str = "smoke",
         *sets: str) -> None:
    """``sets``: KEY=VALUE overrides (as ``repro run --set``), e.g. a longer stage so that the
    comparison is compute-bound: ``ringworld.total_steps=40000``."""
    root = Path(tempfile.mkdtemp()) / "proj"
    overrides = parse_overrides(list(sets), None)
    result = run_in_temp_project(method, root, profile=profile, overrides=overrides)
    keys = [n.split("@")[1] for n in result.executed if n.startswith(f"{stage}@")]
    env = {"REPRO_ROOT": str(root)}
    sequential = sum(timed([str(BIN / "repro"), "exec", method, stage, "--item", k], root, env) for k in keys)
    walls = {"sequential (repro exec per item)": sequential}
    for executor in ("threads", "ray"):
        start = time.perf_counter()
        run_in_temp_project(method, root, profile=profile, executor=executor, overrides=overrides,
                            selection=runner.Selection(only=frozenset({stage}), force=frozenset({stage})))
        walls[f"{executor} (whole repro run)"] = time.perf_counter() - start
        walls[f"{executor} (the stage alone, from its runs)"] = stage_span(Project(root), method, stage)
    for name, wall in walls.items():
        print(f"{stage} x{len(keys)} {name}: {wall:.1f}s  ({sequential / wall:.2f}x speed-up)")


def stage_span(project: Project, method: str, stage: str) -> float:
    """First start to last end of the stage's child runs in the newest parent run: the fan-out
    itself, without the invocation's start-up (Prefect server, planning, imports)."""
    _, children = newest_run_tree(project, method)
    items = [r for r in children if r.data.tags.get("stage") == stage]
    return (max(r.info.end_time for r in items) - min(r.info.start_time for r in items)) / 1000


if __name__ == "__main__":
    main(*sys.argv[1:])
