"""A throw-away method for runtime tests: three tiny numpy stages with a fan-out.

make_data -> square (fan-out over seeds) -> total. ``fail_on`` makes one stage raise, and
``sleep_s`` slows stages down, to test resume and parallelism.
"""
from __future__ import annotations

import time
from typing import ClassVar

import numpy as np

from components.common.config import MethodConfig, Section
from components.common.io import read_json, write_json_atomic
from flows.runtime.dag import Method, Resources, Stage


class Data(Section):
    n: int = 5


class Behaviour(Section):
    fail_on: str = ""
    sleep_s: float = 0.0


class ToyConfig(MethodConfig):
    seeds: list[int] = [0, 1]
    data: Data = Data()
    behaviour: Behaviour = Behaviour()
    SMOKE: ClassVar[dict] = {"data": {"n": 3}}


def _maybe_fail(cfg, name: str) -> None:
    time.sleep(cfg.behaviour.sleep_s)
    if cfg.behaviour.fail_on == name:
        raise RuntimeError(f"injected failure in {name}")


def make_data(cfg, ctx):
    _maybe_fail(cfg, "make_data")
    write_json_atomic(ctx.out_dir / "data.json", list(range(cfg.data.n)))
    ctx.write_metrics({"n": cfg.data.n})


def square(cfg, ctx):
    _maybe_fail(cfg, "square")
    values = np.array(read_json(ctx.inputs["make_data"] / "data.json")) * (ctx.item["seed"] + 1)
    for step, v in enumerate(values):
        ctx.log_metric("value", float(v), step=step)
        ctx.progress(step + 1, len(values))
    write_json_atomic(ctx.out_dir / "squares.json", (values**2).tolist())
    ctx.write_metrics({"sum_sq": float((values**2).sum())})


def total(cfg, ctx):
    _maybe_fail(cfg, "total")
    parts = {k: sum(read_json(p / "squares.json")) for k, p in sorted(ctx.inputs["square"].items())}
    write_json_atomic(ctx.out_dir / "total.json", parts)
    ctx.write_metrics({"total": float(sum(parts.values())), "n_parts": len(parts)})


T = "tests.runtime.toy_flow"
METHOD = Method(
    name="toy_flow",
    title="runtime test DAG",
    config=f"{T}:ToyConfig",
    code=("tests/runtime/toy_flow.py",),
    stages=(
        Stage("make_data", f"{T}:make_data", params=("data", "behaviour")),
        Stage("square", f"{T}:square", params=("seeds", "behaviour"), deps=("make_data",),
              fan_out={"seed": "seeds"}, resources=Resources(num_cpus=1)),
        Stage("total", f"{T}:total", params=("behaviour",), deps=("square",)),
    ),
)
