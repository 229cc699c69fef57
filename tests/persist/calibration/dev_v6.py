"""v6 dev pipeline: every stage of the small profile, one process, one thread, in order, timed
(dev seed 100, dev world seed DEV_WORLD_SEED: its "test" worlds are dev worlds, never a committed
run's). argv: out_dir [stage ...] [--set json-overrides]. Stages already done are skipped.
Prints each stage's wall time and its training curve (val losses at the 4 evaluations)."""
import json, sys, time
from pathlib import Path

import torch

from components.common.context import LocalContext
from components.persist.config import PersistConfig
from components.persist.data import gen_worlds_stage, rollout_env_stage
from components.persist.evaluate import rollout_eval_stage
from components.persist.train import (encode_latents_stage, train_camera_model_stage, train_pixel_model_stage,
                                      train_vae3d_stage, train_world_model_stage)

torch.set_num_threads(1)
SEED, DEV_WORLD_SEED = 100, 4100


def main():
    args = sys.argv[1:]
    over = {}
    if "--set" in args:
        i = args.index("--set")
        over = json.loads(args[i + 1])
        args = args[:i] + args[i + 2:]
    work = Path(args[0])
    only = set(args[1:])
    over = {**over, "world": {"world_seed": DEV_WORLD_SEED, **over.get("world", {})}}
    cfg = PersistConfig.for_profile("small", over)
    d = {k: work / k for k in ("gen_worlds", "rollout_env", "train_vae3d", "encode_latents")}
    plan = [("gen_worlds", gen_worlds_stage, {}, {}),
            ("rollout_env", rollout_env_stage, {"gen_worlds": d["gen_worlds"]}, {}),
            ("train_vae3d", train_vae3d_stage, {"rollout_env": d["rollout_env"]}, {}),
            ("encode_latents", encode_latents_stage, {k: d[k] for k in ("rollout_env", "train_vae3d")}, {}),
            ("train_world_model", train_world_model_stage, {k: d[k] for k in ("rollout_env", "encode_latents")},
             {"seed": SEED}),
            ("train_camera_model", train_camera_model_stage, {k: d[k] for k in ("rollout_env", "encode_latents")},
             {"seed": SEED}),
            ("train_pixel_model-persist", train_pixel_model_stage,
             {k: d[k] for k in ("rollout_env", "encode_latents")}, {"seed": SEED, "variant": "persist"}),
            ("train_pixel_model-baseline", train_pixel_model_stage,
             {k: d[k] for k in ("rollout_env", "encode_latents")}, {"seed": SEED, "variant": "baseline"}),
            ("rollout_eval", rollout_eval_stage,
             {**d, "train_world_model": {str(SEED): work / "train_world_model"},
              "train_camera_model": {str(SEED): work / "train_camera_model"},
              "train_pixel_model": {f"{v}-{SEED}": work / f"train_pixel_model-{v}" for v in ("persist", "baseline")}},
             {"seed": SEED})]
    for name, fn, inputs, item in plan:
        out = work / name
        if (out / "info.done").exists() and name not in only:
            continue
        if only and name not in only:
            continue
        ctx = LocalContext(out_dir=out, inputs=inputs, item=item, metrics_path=out / "metrics.json")
        t = time.time()
        fn(cfg, ctx)
        dt = time.time() - t
        curve = [(n, round(v, 4), s) for n, v, s, _ in ctx.history if "val" in n]
        print(f"{name} {dt:.1f}s curve={curve}", flush=True)
        (out / "info.done").write_text(f"{dt:.1f}")


if __name__ == "__main__":
    main()
