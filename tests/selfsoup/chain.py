"""Run the selfsoup DAG in-process with LocalContext (no runtime): each stage instance writes
into root/<stage>/<item_key>, exactly the inputs layout the stage contract describes."""
from __future__ import annotations

import time
from pathlib import Path

from components.common.context import LocalContext
from flows.runtime.dag import DeclaredParams


def run_chain(method, config, root: Path, only_until: str | None = None) -> dict[str, dict]:
    outputs: dict[str, object] = {}
    summaries: dict[str, dict] = {}
    for stage in method.stages:
        func = stage.load()
        items = stage.fan_out_items(config) if stage.fan_out else {None: {}}
        results = {}
        for key, item in items.items():
            out = root / stage.name / (key or "out")
            inputs = {d: outputs[d] for d in stage.deps}
            ctx = LocalContext(out_dir=out, inputs=inputs, item=item)
            t0 = time.time()
            func(DeclaredParams(config, stage.params, stage.name), ctx)
            summaries[f"{stage.name}/{key}" if key else stage.name] = ctx.summary | {"_seconds": time.time() - t0}
            results[key] = out
        outputs[stage.name] = results if stage.fan_out else results[None]
        if stage.name == only_until:
            break
    return summaries
