"""A throw-away method for runtime tests: tiny numpy stages with a fan-out.

make_data -> square (fan-out over seeds) -> total. Failures and slow stages are injected
through environment variables (not params, so a re-run sees identical params):
``TOY_FAIL_ON=<stage>`` makes that stage raise, ``TOY_SLEEP_ON=<stage>`` with
``TOY_SLEEP_S`` slows it down; ``TOY_CHILD_ON=<stage>`` makes it start a process of its own;
``TOY_REPORT_ENV=<VAR>`` puts that variable's value in make_data's metrics.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from typing import ClassVar

import numpy as np

from components.common.config import MethodConfig, Section
from components.common.io import read_json, write_json_atomic
from flows.runtime.dag import Method, Resources, Stage


class Data(Section):
    n: int = 5


class ToyConfig(MethodConfig):
    seeds: list[int] = [0, 1]
    data: Data = Data()
    SMOKE: ClassVar[dict] = {"data": {"n": 3}}


def _injected(name: str) -> None:
    if os.environ.get("TOY_SLEEP_ON") == name:
        time.sleep(float(os.environ.get("TOY_SLEEP_S", "5")))
    if os.environ.get("TOY_FAIL_ON") == name:
        raise RuntimeError(f"injected failure in {name}")
    if os.environ.get("TOY_CHILD_ON") == name:   # as a DataLoader with workers does
        child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0.01,))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(f"{name}'s child process exited with {child.exitcode}")


def make_data(cfg, ctx):
    _injected("make_data")
    write_json_atomic(ctx.out_dir / "data.json", list(range(cfg.data.n)))
    reported = {"env": os.environ.get(os.environ["TOY_REPORT_ENV"], "")} if "TOY_REPORT_ENV" in os.environ else {}
    ctx.write_metrics({"n": cfg.data.n, **reported})


def square(cfg, ctx):
    (ctx.out_dir / "started").write_text("partial output")  # visible only if not atomic
    _injected("square")
    values = np.array(read_json(ctx.inputs["make_data"] / "data.json")) * (ctx.item["seed"] + 1)
    for step, v in enumerate(values):
        ctx.log_metric("value", float(v), step=step)
        ctx.progress(step + 1, len(values))
    write_json_atomic(ctx.out_dir / "squares.json", (values**2).tolist())
    ctx.write_metrics({"sum_sq": float((values**2).sum())})


def total(cfg, ctx):
    _injected("total")
    parts = {k: sum(read_json(p / "squares.json")) for k, p in sorted(ctx.inputs["square"].items())}
    write_json_atomic(ctx.out_dir / "total.json", parts)
    ctx.log_artifact(ctx.out_dir / "total.json")
    ctx.write_metrics({"total": float(sum(parts.values())), "n_parts": len(parts)})


T = "tests.runtime.toy_flow"
METHOD = Method(
    name="toy_flow",
    title="runtime test DAG",
    config=f"{T}:ToyConfig",
    code=("tests/runtime/toy_flow.py",),
    stages=(
        Stage("make_data", f"{T}:make_data", params=("data",)),
        Stage("square", f"{T}:square", params=("seeds",), deps=("make_data",),
              fan_out={"seed": "seeds"}, resources=Resources(num_cpus=1)),
        Stage("total", f"{T}:total", deps=("square",)),
    ),
)
