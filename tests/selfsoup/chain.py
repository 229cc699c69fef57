"""Run the selfsoup DAG in-process with LocalContext (no runtime): each stage instance writes
into root/<stage>/<item_key>, exactly the inputs layout the stage contract describes."""
from __future__ import annotations

import itertools
import time
from pathlib import Path

from components.common.context import LocalContext
from flows.runtime.dag import DeclaredParams, lookup


def fan_out_items(stage, config) -> dict:
    """{item_key: item} like the runtime: values joined by '-' in declaration order."""
    axes = [list(lookup(config, path)) for path in stage.fan_out.values()]
    return {"-".join(str(v) for v in combo): dict(zip(stage.fan_out, combo))
            for combo in itertools.product(*axes)}


def run_chain(method, config, root: Path, only_until: str | None = None,
              reuse: frozenset[str] = frozenset()) -> dict[str, dict]:
    """Stages named in ``reuse`` are not run; their existing outputs under ``root`` are used."""
    outputs: dict[str, object] = {}
    summaries: dict[str, dict] = {}
    for stage in method.stages:
        func = stage.load()
        items = fan_out_items(stage, config) if stage.fan_out else {None: {}}
        results = {}
        for key, item in items.items():
            out = root / stage.name / (key or "out")
            inputs = {d: outputs[d] for d in stage.deps}
            results[key] = out
            if stage.name in reuse:
                continue
            ctx = LocalContext(out_dir=out, inputs=inputs, item=item)
            t0 = time.time()
            func(DeclaredParams(config, stage.params, stage.name), ctx)
            summaries[f"{stage.name}/{key}" if key else stage.name] = ctx.summary | {"_seconds": time.time() - t0}
        outputs[stage.name] = results if stage.fan_out else results[None]
        if stage.name == only_until:
            break
    return summaries
