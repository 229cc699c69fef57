"""Teacher calibration on the dev data seed (validation split only; never a test split).

    heavy python -m components.fr3d.calibrate NAME '{"teacher": {...}}'

Renders the validation and pre-training splits of the dev data seed once (cached under
``$FR3D_CAL``, default /tmp/fr3d-cal), pre-trains the teacher with the pipeline's own stage and
the given overrides of the small profile, then measures the premises P1 / P2 with the pipeline's
``teacher_premise`` and decomposes the turning-sequence ATE: teacher rotations with true
translations, true rotations with teacher translations, teacher directions with true step
lengths, true directions with teacher step lengths; and the within-sequence fluctuation of the
teacher's step length relative to the truth. One line of JSON per trial goes to results.jsonl.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from components.common.context import LocalContext
from components.fr3d.config import Fr3dConfig
from components.fr3d.data import gen_scenes_stage, is_pretrain, load_split, render_stage
from components.fr3d.evaluate import score_split
from components.fr3d.geometry import relative_poses, rotation_angle_deg
from components.fr3d.teacher import load_teacher, pretrain_teacher_stage
from components.fr3d.tokens import encode_split, teacher_premise

DEV = {"scenes": {"data_seed": 2026}, "teacher": {"seed": 0}}


def deep_update(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_update(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def rendered(cfg, root: Path) -> dict[str, Path]:
    scenes = root / "scenes"
    if not (scenes / "pretrain.pt").is_file():
        gen_scenes_stage(cfg, LocalContext(scenes))
    dirs = {}
    for split in ["val"] + [s for s in cfg.scenes.splits if is_pretrain(s)]:
        d = root / "render" / split
        if not (d / "manifest.json").is_file():
            render_stage(cfg, LocalContext(d, inputs={"gen_scenes": scenes}, item={"split": split}))
        dirs[split] = d
    return dirs


def turning_ate(motion: np.ndarray, frames: dict, ev, context: int) -> float:
    ce, n = ev.context_end, max(ev.horizons)
    lo = ce - context + 1
    preds = {"context": {"motion": motion[:, lo + 1:ce + 1]}, "x": {"motion": motion[:, ce + 1:ce + 1 + n]}}
    rows = score_split("val", preds, frames, ce, [n], context, ev.turn_deg)
    return float(np.mean([r["ate"] for r in rows if r["turning"]]))


def diagnose(teacher, tokens, frames, ev, context) -> dict:
    with torch.no_grad():
        mt = teacher.decode_pose(tokens["z"].float()).double().numpy()
    mg = relative_poses(frames["pose"].astype(np.float64))
    out = {}

    def mix(rot, trans):
        m = rot.copy()
        m[..., :3, 3] = trans[..., :3, 3]
        return m

    tt, tg = mt[..., :3, 3], mg[..., :3, 3]
    nt, ng = np.linalg.norm(tt, axis=-1, keepdims=True), np.linalg.norm(tg, axis=-1, keepdims=True)
    dir_t_len_g = mt.copy()
    dir_t_len_g[..., :3, 3] = tt / np.maximum(nt, 1e-9) * ng
    dir_g_len_t = mt.copy()
    dir_g_len_t[..., :3, 3] = tg / np.maximum(ng, 1e-9) * nt
    out["ate_teacher"] = turning_ate(mt, frames, ev, context)
    out["ate_trot_gtrans"] = turning_ate(mix(mt, mg), frames, ev, context)
    out["ate_grot_ttrans"] = turning_ate(mix(mg, mt), frames, ev, context)
    out["ate_tdir_glen"] = turning_ate(mix(mg, dir_t_len_g), frames, ev, context)
    out["ate_gdir_tlen"] = turning_ate(mix(mg, dir_g_len_t), frames, ev, context)
    ratio = (nt / np.maximum(ng, 1e-9))[:, 1:, 0]
    moving = ng[:, 1:, 0].mean(1) > 0.2
    out["step_len_abs_err"] = float(np.abs(nt - ng)[:, 1:].mean())
    out["step_len_cv"] = float((ratio.std(1) / ratio.mean(1))[moving].mean())
    out["yaw_err_deg"] = float(rotation_angle_deg(
        np.linalg.inv(mg[:, 1:, :3, :3]) @ mt[:, 1:, :3, :3]).mean())
    return out


def main(name: str, overrides: str = "{}") -> None:
    torch.set_num_threads(1)
    root = Path(os.environ.get("FR3D_CAL", "/tmp/fr3d-cal"))
    extra = json.loads(overrides)
    cfg = Fr3dConfig.for_profile("small", deep_update(DEV, extra))
    dirs = rendered(cfg, root)
    out = root / "teachers" / name
    t0 = time.time()
    ctx = LocalContext(out, inputs={"render": dirs})
    pretrain_teacher_stage(cfg, ctx)
    train_s = time.time() - t0
    teacher = load_teacher(out)
    frames = load_split(dirs["val"])
    tokens = encode_split(teacher, frames["rgb"])
    premise, _ = teacher_premise(teacher, tokens, frames, cfg.evaluate, cfg.forecaster.context,
                                 cfg.scenes.max_depth)
    losses = [v for n, v, _, _ in ctx.history if n == "teacher/loss"]
    result = {"name": name, "overrides": extra, "train_s": round(train_s, 1),
              "loss_tail": [round(x, 3) for x in losses[-4:]], **premise,
              **diagnose(teacher, tokens, frames, cfg.evaluate, cfg.forecaster.context)}
    line = json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()})
    print(line)
    with open(root / "results.jsonl", "a") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
