"""Forecaster convergence check on the dev data seed (validation split only).

    heavy python -m components.fr3d.calibrate_forecast TEACHER '{"forecaster": {...}}' [overrides]

Uses a teacher trained by ``calibrate`` (same cache root), renders the dev training split,
extracts tokens with the pipeline's functions and trains FR3D and the baselines for seed 0,
printing each model's validation loss curve and last-quarter drop (premise P3), and the
validation loss of the untrained model: its zero-initialised outputs copy the last context
frame's tokens, so that is the copy-last loss a trained forecaster has to beat (v6).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from components.common.context import LocalContext
from components.fr3d.calibrate import DEV, deep_update
from components.fr3d.config import Fr3dConfig
from components.fr3d.data import load_split, render_stage
from components.fr3d.forecaster import (build, token_stats, train_forecaster,
                                        validation_windows, window_loss)
from components.fr3d.teacher import load_teacher
from components.fr3d.tokens import encode_split


def main(teacher_name: str, overrides: str = "{}") -> None:
    torch.set_num_threads(1)
    root = Path(os.environ.get("FR3D_CAL", "/tmp/fr3d-cal"))
    cfg = Fr3dConfig.for_profile("small", deep_update(DEV, json.loads(overrides)))
    d = root / "render" / "train"
    if not (d / "manifest.json").is_file():
        render_stage(cfg, LocalContext(d, inputs={"gen_scenes": root / "scenes"}, item={"split": "train"}))
    teacher = load_teacher(root / "teachers" / teacher_name)
    tokens = encode_split(teacher, load_split(d)["rgb"])
    val = encode_split(teacher, load_split(root / "render" / "val")["rgb"])
    fc = cfg.forecaster
    for variant in ("fr3d", *fc.variants):
        key = "enc" if variant == "feat2d" else "F"
        f_val, z_val = validation_windows(val, token_stats(tokens), key, fc)
        untrained = build(variant, fc, f_val.shape[-1]).eval()
        with torch.no_grad():
            copy = sum(window_loss(untrained, f_val, z_val, k, fc, tuple(val["grid"])).item()
                       for k in range(1, fc.rollout + 1)) / fc.rollout
        t0 = time.time()
        ctx = LocalContext(root / "forecast" / variant)
        out = train_forecaster(variant, 0, cfg.forecaster, tokens, ctx, prefix=variant, val_tokens=val)
        curve = [(s, round(v, 4)) for n, v, s, _ in ctx.history if n == f"{variant}/val_loss"]
        print(json.dumps({"variant": variant, "s": round(time.time() - t0, 1), "curve": curve,
                          "drop": round(out["val_last_quarter_drop"], 4),
                          "copy_last_val_loss": round(copy, 4)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
