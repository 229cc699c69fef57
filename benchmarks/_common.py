from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed(command: list[str], cwd: Path, env: dict | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def median_of(command: list[str], cwd: Path, repeats: int, env: dict | None = None) -> float:
    return statistics.median(timed(command, cwd, env) for _ in range(repeats))


def newest_run_tree(project, method: str, parent_filter=lambda run: True, max_results: int = 500):
    """The method's newest MLflow parent run that ``parent_filter`` accepts, and its child runs."""
    from mlflow import MlflowClient

    client = MlflowClient(project.tracking_uri)
    exp = client.get_experiment_by_name(method)
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"],
                              max_results=max_results)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags and parent_filter(r))
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, children
