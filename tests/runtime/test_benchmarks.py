"""The benchmark scripts' arithmetic (they read MLflow records; here fake ones)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

from tests.runtime.toy_flow import METHOD as TOY
from flows.runtime.tracking import child_run_name

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _child(stage: str, item: dict | None, seconds: float):
    # named exactly as the tracker names child runs: the name holds no "stage@item"
    name = child_run_name("toy_flow", stage, item, "smoke")
    return SimpleNamespace(data=SimpleNamespace(tags={"stage": stage, "mlflow.runName": name}),
                           info=SimpleNamespace(start_time=1000, end_time=1000 + int(seconds * 1000)))


def test_overhead_matches_child_runs_to_their_stage_and_takes_the_critical_path():
    overhead = _load("overhead")
    children = [_child("make_data", None, 1.0), _child("square", {"seed": 0}, 2.0),
                _child("square", {"seed": 1}, 3.0), _child("total", None, 0.5)]
    compute = overhead.compute_by_stage(children)
    assert compute == {"make_data": [1.0], "square": [2.0, 3.0], "total": [0.5]}
    assert overhead.critical_path(TOY, compute) == 1.0 + 3.0 + 0.5
    # a stage that did not run (up to date) costs nothing on the path
    assert overhead.critical_path(TOY, {"total": [0.5]}) == 0.5
