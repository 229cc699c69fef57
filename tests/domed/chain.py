"""Run the domed stages in order with LocalContext (no runtime): used by the smoke test
when the runtime is not available, and by hand for timing."""
from __future__ import annotations

import itertools
import time
from pathlib import Path

from components.common.context import LocalContext
from components.domed import allocation, data, evaluate, train
from components.domed.config import DomedConfig


def run_chain(cfg: DomedConfig, root: Path, log=print, aggregate: bool = True) -> dict:
    root = Path(root)
    folds = [(e, s) for s, e in itertools.product(cfg.seeds, cfg.data.test_envs)]  # seed-major
    key = lambda *values: "-".join(str(v) for v in values)  # noqa: E731
    timings, out = {}, {}

    def run(stage, func, inputs, item=None, name=None):
        name = name or stage
        ctx = LocalContext(out_dir=root / name, inputs=inputs, item=item or {})
        t0 = time.time()
        func(cfg, ctx)
        timings[stage] = timings.get(stage, 0.0) + time.time() - t0
        return ctx

    run("build_domains", data.build_domains_stage, {})
    run("allocate", allocation.allocate_stage, {})
    base = {"build_domains": root / "build_domains", "allocate": root / "allocate"}
    fan = lambda stage, keys: {k: root / f"{stage}@{k}" for k in keys}  # noqa: E731
    fold_keys = [key(e, s) for e, s in folds]
    for e, s in folds:
        item = {"test_env": e, "seed": s}
        run("train_teachers", train.train_teachers_stage, base, item, f"train_teachers@{key(e, s)}")
        run("train_erm", train.train_erm_stage, base, item, f"train_erm@{key(e, s)}")
        run("teacher_predict", train.teacher_predict_stage,
            {**base, "train_teachers": fan("train_teachers", fold_keys), "train_erm": fan("train_erm", fold_keys)},
            item, f"teacher_predict@{key(e, s)}")
        for v in cfg.student.variants:
            run("train_student", train.train_student_stage,
                {**base, "teacher_predict": fan("teacher_predict", fold_keys)},
                {**item, "variant": v}, f"train_student@{key(v, e, s)}")
        student_keys = [key(v, e, s) for v in cfg.student.variants]
        out[key(e, s)] = run("evaluate", evaluate.evaluate_stage,
                             {**base, "train_erm": fan("train_erm", fold_keys),
                              "train_student": fan("train_student", student_keys)},
                             item, f"evaluate@{key(e, s)}").summary
        log(f"fold {key(e, s)} done; stage seconds so far {timings}")
    if not aggregate:
        return {"aggregate": {}, "folds": out, "timings": timings}
    agg = run("aggregate", evaluate.aggregate_stage, {"evaluate": fan("evaluate", fold_keys)})
    return {"aggregate": agg.summary, "folds": out, "timings": timings}


if __name__ == "__main__":
    import json
    import sys

    # python -m tests.domed.chain PROFILE ROOT [TEST_ENV ...]  (a subset of folds skips aggregate)
    profile, root, envs = sys.argv[1], Path(sys.argv[2]), [int(e) for e in sys.argv[3:]]
    t0 = time.time()
    cfg = DomedConfig.for_profile(profile, {"data": {"test_envs": envs}} if envs else None)
    result = run_chain(cfg, root, aggregate=not envs)
    result["wall_s"] = time.time() - t0
    print(json.dumps(result["aggregate"], indent=1))
    print("wall", result["wall_s"], result["timings"])
