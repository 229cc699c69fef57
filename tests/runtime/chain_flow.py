"""A throw-away method for runtime tests: a two-stage fan-out chain with per-item deps.

make_data -> square (fan-out over seeds) -> shift (fan-out over seeds, reads only its own
square item) -> total. Adding a seed must run square and shift of the new seed only (and total).
"""
from __future__ import annotations

from typing import ClassVar

from components.common.config import MethodConfig
from components.common.io import read_json, write_json_atomic
from flows.runtime.dag import Method, Stage


class ChainConfig(MethodConfig):
    seeds: list[int] = [0, 1]
    n: int = 4
    SMOKE: ClassVar[dict] = {}


def make_data(cfg, ctx):
    write_json_atomic(ctx.out_dir / "data.json", list(range(cfg.n)))
    ctx.write_metrics({"n": cfg.n})


def square(cfg, ctx):
    values = read_json(ctx.inputs["make_data"] / "data.json")
    write_json_atomic(ctx.out_dir / "values.json", [(v * (ctx.item["seed"] + 1)) ** 2 for v in values])
    ctx.write_metrics({"items": 1})


def shift(cfg, ctx):
    values = read_json(ctx.inputs["square"] / "values.json")   # its own item's folder
    write_json_atomic(ctx.out_dir / "values.json", [v + 1 for v in values])
    ctx.write_metrics({"sum": float(sum(values)) + len(values)})


def total(cfg, ctx):
    parts = {k: sum(read_json(p / "values.json")) for k, p in sorted(ctx.inputs["shift"].items())}
    write_json_atomic(ctx.out_dir / "total.json", parts)
    ctx.write_metrics({"total": float(sum(parts.values())), "n_parts": len(parts)})


C = "tests.runtime.chain_flow"
METHOD = Method(
    name="chain_flow",
    title="runtime test: fan-out chain with per-item deps",
    config=f"{C}:ChainConfig",
    code=("tests/runtime/chain_flow.py",),
    stages=(
        Stage("make_data", f"{C}:make_data", params=("n",)),
        Stage("square", f"{C}:square", params=("seeds",), deps=("make_data",), fan_out={"seed": "seeds"}),
        Stage("shift", f"{C}:shift", params=("seeds",), deps=("square",), item_deps=("square",),
              fan_out={"seed": "seeds"}),
        Stage("total", f"{C}:total", deps=("shift",)),
    ),
)
