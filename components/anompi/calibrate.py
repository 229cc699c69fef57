"""Calibration on the validation split (never test): run the stages locally for one dev seed
with overridden knobs and print validation numbers. Used before pre-registration; the values
tried and kept are recorded in CLAIMS.md.

    python -m components.anompi.calibrate OUT_DIR [--seed 100] [--set idpo.lambda_cost=0.3 ...]

Upstream stages (build_env, pretrain_perception, passive_baselines) are cached in OUT_DIR and
reused when their outputs exist; policy stages go to OUT_DIR/<tag>.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

from components.common.context import LocalContext


def _run(stage_fn, cfg, out: Path, inputs: dict, item: dict | None = None) -> dict:
    ctx = LocalContext(out_dir=out, inputs=inputs, item=item or {})
    t0 = time.time()
    stage_fn(cfg, ctx)
    print(f"  {out.name}: {time.time() - t0:.1f} s", flush=True)
    (out / "metrics.json").write_text(json.dumps(ctx.summary, indent=1, default=float))
    return ctx.summary


def _cached(stage_fn, cfg, out: Path, inputs: dict, item=None) -> dict:
    done = out / "metrics.json"
    if done.exists():
        return json.loads(done.read_text())
    return _run(stage_fn, cfg, out, inputs, item)


def overrides(pairs: list[str]) -> dict:
    out: dict = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        node = out
        *path, last = key.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = yaml.safe_load(value)
    return out


def main() -> None:
    import torch

    from components.anompi.config import AnompiConfig
    from components.anompi.data import build_env_stage
    from components.anompi.evaluate import evaluate_split
    from components.anompi.passive import passive_baselines_stage
    from components.anompi.pretrain import pretrain_perception_stage
    from components.anompi.train import build_preferences_stage, rollout_stage, sft_policy_stage, train_idpo_stage

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--tag", default="")
    ap.add_argument("--upstream-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = AnompiConfig.for_profile("small", overrides(args.set))
    root = args.out
    env_dir, pdir, hdir = root / "env", root / "perception", root / "passive"
    _cached(build_env_stage, cfg, env_dir, {})
    _cached(pretrain_perception_stage, cfg, pdir, {"build_env": env_dir})
    passive = _cached(passive_baselines_stage, cfg, hdir, {"build_env": env_dir, "pretrain_perception": pdir})
    print({k: round(v, 3) for k, v in passive.items() if k.startswith(("min_", "oracle", "val_acc_o", "val_acc_b"))})
    if args.upstream_only:
        return
    s = str(args.seed)
    tag = root / (args.tag or "policy")
    base = {"build_env": env_dir, "pretrain_perception": pdir}
    _cached(sft_policy_stage, cfg, tag / "sft", base, {"seed": args.seed})
    base["sft_policy"] = {s: tag / "sft"}
    _cached(rollout_stage, cfg, tag / "rollout", base, {"seed": args.seed})
    base["rollout"] = {s: tag / "rollout"}
    runs = {"script": (None, "script"), "sft": (tag / "sft", "greedy")}
    for variant in cfg.idpo.variants:
        prefs = tag / f"prefs_{variant}"
        m = _run(build_preferences_stage, cfg, prefs, base, {"variant": variant, "seed": args.seed})
        print(f"  pairs {variant}: {json.dumps({k: round(v, 3) for k, v in m.items()})}")
        inputs = {**base, "build_preferences": {f"{variant}-{s}": prefs}}
        m = _run(train_idpo_stage, cfg, tag / f"idpo_{variant}", inputs, {"variant": variant, "seed": args.seed})
        print(f"  idpo {variant}: " + json.dumps({k: round(v, 3) for k, v in m.items() if "round" in k and
                                                  ("acc" in k or "frames" in k or "n_" in k)}))
        runs[f"idpo_{variant}"] = (tag / f"idpo_{variant}", "greedy")
    rows, _, metrics = evaluate_split(cfg, env_dir, pdir, hdir, runs, "val", args.seed)
    print("VALIDATION:", json.dumps({k: round(float(v), 3) for k, v in sorted(metrics.items())}))
    (tag / "val_metrics.json").write_text(json.dumps(metrics, indent=1, default=float))


if __name__ == "__main__":
    main()
