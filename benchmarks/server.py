"""What the Prefect API server costs a run: the same forced `repro run` of a method with the
temporary server that each invocation starts, and with the persistent one of `repro ui`.

Both are timed side by side on one temp project (median of REPEATS runs each). For each run:
the invocation's wall time, the MLflow parent run's wall time (the flow itself), and the stage
compute, so the fixed start-up (outside the flow: imports, planning, the server) and the
per-instance overhead inside the flow are separated.

    .venv/bin/python benchmarks/server.py [METHOD] [PROFILE] [REPEATS]
"""
from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _common import BIN, newest_run_tree, timed
from overhead import compute_by_stage, critical_path

from flows.runtime import registry
from flows.runtime.project import Project
from flows.runtime.testing import run_in_temp_project


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def last_parent(project: Project, method: str) -> tuple[float, float, int]:
    """(flow wall s, best possible schedule of its stage compute s, instances) of the method's
    newest parent run; the bound is overhead.py's: critical path or compute over 2 workers."""
    parent, children = newest_run_tree(project, method)
    compute = compute_by_stage(children)
    total = sum(sum(times) for times in compute.values())
    bound = max(critical_path(registry.get(method), compute), total / 2)
    return (parent.info.end_time - parent.info.start_time) / 1000, bound, len(children)


def forced_runs(project: Project, method: str, profile: str, repeats: int) -> list[tuple[float, ...]]:
    stages = [arg for s in registry.get(method).stages for arg in ("--force", s.name)]
    command = [str(BIN / "repro"), "run", method, "--profile", profile, *stages]
    out = []
    for _ in range(repeats):
        wall = timed(command, project.root, {"REPRO_ROOT": str(project.root)})
        out.append((wall, *last_parent(project, method)))
    return out


def with_repro_ui(project: Project):
    port, prefect_port = free_port(), free_port()
    proc = subprocess.Popen([str(BIN / "repro"), "ui", "--port", str(port), "--prefect-port", str(prefect_port)],
                            env={**os.environ, "REPRO_ROOT": str(project.root)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{prefect_port}/api/health", timeout=2)
            return proc
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("repro ui's Prefect server did not come up") from None
            time.sleep(1)


def report(name: str, runs: list[tuple[float, ...]]) -> None:
    wall, flow, bound, n = (statistics.median(column) for column in zip(*runs))
    print(f"{name:32s} invocation {wall:6.1f}s = start-up outside the flow {wall - flow:5.1f}s + flow "
          f"{flow:6.1f}s (best schedule of its compute {bound:5.1f}s; overhead "
          f"{(flow - bound) / n:4.2f}s per instance of {n:.0f})")


def main(method: str = "linrnn", profile: str = "smoke", repeats: str = "3") -> None:
    root = Path(tempfile.mkdtemp()) / "proj"
    run_in_temp_project(method, root, profile=profile)   # warm: data and caches exist
    project = Project(root)
    temporary = forced_runs(project, method, profile, int(repeats))
    ui = with_repro_ui(project)
    try:
        persistent = forced_runs(project, method, profile, int(repeats))
    finally:
        ui.send_signal(signal.SIGINT)
        ui.wait(timeout=60)
    print(f"{method} [{profile}], all stages forced, median of {repeats}:")
    report("temporary Prefect server", temporary)
    report("persistent server (`repro ui`)", persistent)
    saved = statistics.median(r[0] for r in temporary) - statistics.median(r[0] for r in persistent)
    print(f"persistent server saves {saved:.1f}s per invocation")


if __name__ == "__main__":
    main(*sys.argv[1:4])
