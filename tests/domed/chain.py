"""Run the domed stages in order with LocalContext (no runtime): for timing and for the
calibration of CLAIMS.md (``--premise-only`` stops after the teachers' source-domain
diagnostics, so no test-domain number is ever computed)."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from components.common.context import LocalContext
from components.domed import allocation, data, evaluate, train
from components.domed.config import DomedConfig


def run_chain(cfg: DomedConfig, root: Path, log=print, premise_only: bool = False) -> dict:
    root = Path(root)
    instances = [{"benchmark": b, "seed": s} for b in cfg.data.benchmarks for s in cfg.seeds]
    keys = [train.instance_key(i["benchmark"], i["seed"]) for i in instances]
    timings = {}

    def fan(stage):
        return {k: root / f"{stage}@{k}" for k in keys}

    def own(stage, key):   # an item_deps input: this instance's item folder
        return root / f"{stage}@{key}"

    def run(stage, func, inputs, item=None, key=None):
        ctx = LocalContext(out_dir=root / (f"{stage}@{key}" if key else stage), inputs=inputs, item=item or {})
        t0 = time.time()
        func(cfg, ctx)
        timings[stage] = timings.get(stage, 0.0) + time.time() - t0
        return ctx

    run("build_domains", data.build_domains_stage, {})
    run("allocate", allocation.allocate_stage, {"build_domains": root / "build_domains"})
    base = {"build_domains": root / "build_domains", "allocate": root / "allocate"}
    summaries = {}
    for item, key in zip(instances, keys):
        run("train_teachers", train.train_teachers_stage, base, item, key)
        run("train_erm", train.train_erm_stage, base, item, key)
        summaries[key] = run("teacher_predict", train.teacher_predict_stage,
                             {**base, "train_teachers": own("train_teachers", key), "train_erm": own("train_erm", key)},
                             item, key).summary
        if not premise_only:
            run("train_student", train.train_student_stage, {**base, "teacher_predict": own("teacher_predict", key)},
                item, key)
            run("evaluate", evaluate.evaluate_stage,
                {**base, "train_erm": own("train_erm", key), "train_student": own("train_student", key)}, item, key)
        log(f"{key} done; stage seconds so far {timings}")
    if premise_only:
        return {"teacher_predict": summaries, "timings": timings}
    agg = run("aggregate", evaluate.aggregate_stage,
              {"evaluate": fan("evaluate"), "teacher_predict": fan("teacher_predict")})
    return {"aggregate": agg.summary, "timings": timings}


if __name__ == "__main__":
    # python -m tests.domed.chain PROFILE ROOT [--premise-only] [--set JSON]
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("root", type=Path)
    parser.add_argument("--premise-only", action="store_true")
    parser.add_argument("--set", default="{}", help="JSON overrides of the profile")
    args = parser.parse_args()
    t0 = time.time()
    cfg = DomedConfig.for_profile(args.profile, json.loads(args.set))
    result = run_chain(cfg, args.root, premise_only=args.premise_only)
    result["wall_s"] = time.time() - t0
    print(json.dumps(result, indent=1, default=str))
