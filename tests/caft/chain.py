"""Run the caft DAG by chaining the stage functions with LocalContext (no runtime).

Mirrors flows/caft.py: fan-out stages get ``{item_key: Path}`` inputs like the runtime gives.
"""
from __future__ import annotations

import itertools
import time
from pathlib import Path

from components.common.context import LocalContext
from flows.caft import METHOD
from flows.runtime.dag import lookup


def fan_out_items(stage, cfg) -> dict:
    """Same keys as the runtime (values joined by '-'); re-done here so the chain does not
    depend on the runtime's key validation."""
    if not stage.fan_out:
        return {None: {}}
    names, axes = list(stage.fan_out), [list(lookup(cfg, p)) for p in stage.fan_out.values()]
    return {"-".join(map(str, combo)): dict(zip(names, combo)) for combo in itertools.product(*axes)}


def run_chain(cfg, root: Path, log=print) -> dict[str, LocalContext]:
    root = Path(root)
    outs: dict[str, object] = {}   # stage -> Path or {item_key: Path}
    contexts: dict[str, LocalContext] = {}
    for stage in METHOD.stages:
        func = stage.load()
        inputs = {dep: outs[dep] for dep in stage.deps}
        items = fan_out_items(stage, cfg)
        outs[stage.name] = {} if stage.fan_out else None
        for key, item in items.items():
            out_dir = root / stage.name / (key or "")
            start = time.time()
            ctx = LocalContext(out_dir=out_dir, inputs=inputs, item=item)
            func(cfg, ctx)
            log(f"{stage.name}[{key}] {time.time() - start:.1f}s {ctx.summary}")
            contexts[f"{stage.name}/{key}" if key else stage.name] = ctx
            if stage.fan_out:
                outs[stage.name][key] = out_dir
            else:
                outs[stage.name] = out_dir
    return contexts
