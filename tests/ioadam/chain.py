"""Run the ioadam DAG in-process with LocalContext (no DVC/Prefect/MLflow).

Stages come from ``flows/ioadam.py`` in declaration order; each sees only its declared params
(``DeclaredParams``) and its deps' outputs, laid out like the runtime does. Fan-out instances
can run in a small process pool. Used by the stage test and to run a profile by hand:

    .venv/bin/python -m tests.ioadam.chain OUT_DIR [smoke|small] [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from components.common.context import LocalContext
from components.ioadam.config import IOAdamConfig
from flows.ioadam import METHOD
from flows.runtime.dag import DeclaredParams


def _stage_dir(root: Path, stage: str, key: str | None) -> Path:
    return root / stage / key if key else root / stage


def _run_one(profile: str, overrides: dict, root: str, stage_name: str, key: str | None,
             item: dict, inputs: dict) -> tuple[str, str | None, dict, float]:
    cfg = IOAdamConfig.for_profile(profile, overrides)
    stage = METHOD.stage(stage_name)
    ctx = LocalContext(out_dir=_stage_dir(Path(root), stage_name, key), inputs=inputs, item=item)
    start = time.time()
    stage.load()(DeclaredParams(cfg, stage.params, stage_name), ctx)
    return stage_name, key, ctx.summary, time.time() - start


def run_chain(root: Path, profile: str = "smoke", overrides: dict | None = None,
              workers: int = 1) -> dict[str, Any]:
    """Run every stage; returns ``{stage: summary}`` (``{stage: {key: summary}}`` for fan-outs)."""
    overrides = overrides or {}
    cfg = IOAdamConfig.for_profile(profile, overrides)
    outs: dict[str, Any] = {}
    summaries: dict[str, Any] = {"_seconds": {}}
    pool = ProcessPoolExecutor(workers) if workers > 1 else None
    try:
        for stage in METHOD.stages:
            inputs = {d: outs[d] for d in stage.deps}
            jobs = list(_items(stage, cfg).items()) or [(None, {})]
            args = [(profile, overrides, str(root), stage.name, k, v, inputs) for k, v in jobs]
            results = list(pool.map(_run_one, *zip(*args))) if pool else [_run_one(*a) for a in args]
            if stage.fan_out:
                outs[stage.name] = {k: _stage_dir(root, stage.name, k) for k, _ in jobs}
                summaries[stage.name] = {k: s for _, k, s, _ in results}
            else:
                outs[stage.name] = _stage_dir(root, stage.name, None)
                summaries[stage.name] = results[0][2]
            summaries["_seconds"][stage.name] = sum(r[3] for r in results)
            print(f"[chain] {stage.name}: {len(results)} instance(s), "
                  f"{summaries['_seconds'][stage.name]:.1f}s of work", file=sys.stderr, flush=True)
    finally:
        if pool:
            pool.shutdown()
    return summaries


def _items(stage, cfg) -> dict[str, dict]:
    """Fan-out items keyed like the runtime (values joined by '-')."""
    import itertools

    from flows.runtime.dag import lookup

    names = list(stage.fan_out)
    axes = [list(lookup(cfg, path)) for path in stage.fan_out.values()]
    return {"-".join(str(v) for v in combo): dict(zip(names, combo)) for combo in itertools.product(*axes)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("profile", nargs="?", default="smoke")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    start = time.time()
    summaries = run_chain(args.out, args.profile, workers=args.workers)
    summaries["_wall_seconds"] = time.time() - start
    (args.out / "summaries.json").write_text(json.dumps(summaries, indent=2, default=str))
    print(f"[chain] {args.profile} done in {summaries['_wall_seconds']:.1f}s wall", file=sys.stderr)


if __name__ == "__main__":
    main()
