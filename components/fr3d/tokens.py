"""extract_tokens: the frozen teacher over every domain split, and the teacher premise.

Tokens are computed from frame 0 with the recurrent state carried through the whole sequence
(the teacher was pre-trained on clips of that length). On the validation split (domain A
settings, never scored as a result) the same stage measures whether the teacher is worth
distilling from: its depth on the true future frames against copying the true depth of the last
context frame, and its pose on turning sequences against constant-velocity extrapolation of
the true motion.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from components.common.io import save_torch, write_table
from components.fr3d.data import is_pretrain, load_split
from components.fr3d.evaluate import forecast_all, ground_truth_references, score_split
from components.fr3d.teacher import load_teacher, to_tensor_rgb

PREMISE_SPLIT = "val"


@torch.no_grad()
def encode_split(teacher, rgb: np.ndarray, batch: int = 32) -> dict:
    zs, fs, es = [], [], []
    for i in range(0, len(rgb), batch):
        z, f, e = teacher(to_tensor_rgb(rgb[i:i + batch]))
        zs.append(z.half())
        fs.append(f.half())
        es.append(e.half())
    grid = (rgb.shape[2] // teacher.patch, rgb.shape[3] // teacher.patch)
    # the 2D-feature baseline's decoder copies the teacher's depth-head context (fair decoder)
    return {"z": torch.cat(zs), "F": torch.cat(fs), "enc": torch.cat(es), "grid": grid,
            "depth_context": int(getattr(teacher, "depth_context", 0))}


def teacher_premise(teacher, tokens: dict, frames: dict, ev, context: int,
                    max_depth: float) -> tuple[dict[str, float], pd.DataFrame]:
    """P1: teacher AbsRel on the true frame 2 s ahead / ground-truth copy-last AbsRel.
    P2: teacher ATE at 2 s / ground-truth constant-velocity ATE, turning sequences only."""
    ce, n_ahead = ev.context_end, max(ev.horizons)
    teacher_preds = forecast_all(teacher, {}, tokens, ce, n_ahead, context, ev.batch_size)
    teacher_preds = {k: teacher_preds[k] for k in ("context", "oracle")}
    refs = ground_truth_references(frames, ce, n_ahead, context, max_depth)
    rows = (score_split(PREMISE_SPLIT, teacher_preds, frames, ce, ev.horizons, context, ev.turn_deg)
            + score_split(PREMISE_SPLIT, refs, frames, ce, ev.horizons, context, ev.turn_deg))
    table = pd.DataFrame(rows)
    at = table[table.horizon == n_ahead]
    turning = at[at.turning]

    def mean(df, method, metric):
        return float(df.loc[df.method == method, metric].mean())

    out = {"teacher_absrel_2s": mean(at, "oracle", "absrel"),
           "gt_copy_last_absrel_2s": mean(at, "gt_copy_last", "absrel"),
           "teacher_ate_2s_turning": mean(turning, "oracle", "ate"),
           "gt_const_vel_ate_2s_turning": mean(turning, "gt_const_vel", "ate"),
           "n_turning": int(turning[turning.method == "oracle"].shape[0])}
    out["P1_depth_ratio"] = out["teacher_absrel_2s"] / out["gt_copy_last_absrel_2s"]
    out["P2_pose_ratio"] = (out["teacher_ate_2s_turning"] / out["gt_const_vel_ate_2s_turning"]
                            if out["n_turning"] else float("nan"))
    return out, table


def extract_tokens_stage(cfg, ctx) -> None:
    teacher = load_teacher(ctx.inputs["pretrain_teacher"])
    summary = {}
    splits = [s for s in sorted(ctx.inputs["render"]) if not is_pretrain(s)]
    for i, split in enumerate(splits):
        frames = load_split(ctx.inputs["render"][split])
        tokens = encode_split(teacher, frames["rgb"])
        save_torch(ctx.out_dir / f"{split}.pt", tokens)
        summary[f"n_tokens_{split}"] = int(tokens["F"].shape[2])
        if split == PREMISE_SPLIT:
            premise, table = teacher_premise(teacher, tokens, frames, cfg.evaluate,
                                             cfg.forecaster.context, cfg.scenes.max_depth)
            write_table(ctx.out_dir / "teacher_premise.parquet", table)
            summary.update(premise)
        ctx.progress(i + 1, len(splits), f"tokens {split}")
    ctx.write_metrics(summary)
