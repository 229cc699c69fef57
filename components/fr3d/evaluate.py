"""rollout_eval: forecast every eval window, decode with the frozen teacher heads (or the 2D
baseline's decoder), score against ground truth per horizon.

Window: context frames ce-3..ce (teacher tokens computed from frame 0 on the real frames),
forecast ce+1..ce+max(horizons). Methods:
- oracle:     the teacher on the real future frames (upper bound, sees the future);
- copy_last:  the teacher's depth at ce for every horizon; a stationary ego;
- const_vel:  pose only: the teacher's last ego-motion repeated (closed form);
- fr3d, no_share (pose + depth), scene_only (depth), feat2d (depth via its A-trained decoder),
  feat2d_copy_last (that decoder on the last context frame: the 2D forecaster's own copy-last);
- gt_copy_last, gt_const_vel: the same two yardsticks on ground truth (shown, not judged).
Depth: per-frame median scaling, AbsRel and delta1 on valid GT pixels, split into static and
dynamic pixels by the GT mask. Pose: trajectory = teacher poses of the context + forecast
motions, Sim(3)-aligned to GT (Umeyama), ATE / RPE over the forecast part.
"""
from __future__ import annotations

import numpy as np
import torch

from components.common.io import load_torch, write_table
from components.fr3d.data import EVAL_SPLITS, load_split
from components.fr3d.forecaster import (POSE_VARIANTS, denormalise, load_forecaster, normalise,
                                        rollout)
from components.fr3d.geometry import (compose, depth_errors, median_scale, relative_poses,
                                      rotation_angle_deg, trajectory_errors)
from components.fr3d.teacher import load_teacher, unpatchify


def forecast_all(teacher, models: dict, tokens: dict, ce: int, n_ahead: int, context: int,
                 batch: int) -> dict[str, dict[str, np.ndarray]]:
    """Per method: depth (N, n_ahead, H, W) and/or motions (N, n_ahead, 4, 4). The context
    motions (N, context-1, 4, 4) are the teacher's (shared by every method)."""
    grid = tuple(tokens["grid"])
    z, f = tokens["z"].float(), tokens["F"].float()
    lo, hi = ce - context + 1, ce + 1
    out: dict[str, dict[str, list]] = {}

    def add(method, key, value):
        out.setdefault(method, {}).setdefault(key, []).append(value.numpy())

    with torch.no_grad():
        for i in range(0, len(f), batch):
            sl = slice(i, i + batch)
            fut = slice(hi, hi + n_ahead)
            ctx_motion = teacher.decode_pose(z[sl, lo + 1:hi]).double()
            add("context", "motion", ctx_motion)
            add("oracle", "depth", teacher.decode_depth(f[sl, fut], grid))
            add("oracle", "motion", teacher.decode_pose(z[sl, fut]).double())
            last_depth = teacher.decode_depth(f[sl, ce], grid)
            add("copy_last", "depth", last_depth[:, None].expand(-1, n_ahead, -1, -1))
            eye = torch.eye(4, dtype=torch.float64).expand(len(last_depth), n_ahead, 4, 4)
            add("copy_last", "motion", eye)
            add("const_vel", "motion", ctx_motion[:, -1:].expand(-1, n_ahead, -1, -1))
            for name, (variant, model, stats, decoder) in models.items():
                key = "enc" if variant == "feat2d" else "F"
                f_ctx = normalise(tokens[key][sl, lo:hi], stats, key)
                z_ctx = normalise(z[sl, lo:hi], stats, "z") if variant in POSE_VARIANTS else None
                f_pred, z_pred = rollout(model, f_ctx, z_ctx, grid, n_ahead)
                if decoder is not None:
                    # the 2D decoder was trained on normalised features (train_depth_decoder)
                    add(name, "depth", unpatchify(decoder(f_pred, grid), *grid).exp())
                    # the same decoder on the last context frame: this forecaster's own copy-last
                    last = normalise(tokens[key][sl, ce], stats, key)
                    last = unpatchify(decoder(last, grid), *grid).exp()
                    add(f"{name}_copy_last", "depth", last[:, None].expand(-1, n_ahead, -1, -1))
                else:
                    add(name, "depth", teacher.decode_depth(denormalise(f_pred, stats, key), grid))
                if z_pred is not None:
                    add(name, "motion", teacher.decode_pose(denormalise(z_pred, stats, "z")).double())
    return {m: {k: np.concatenate(v) for k, v in d.items()} for m, d in out.items()}


def ground_truth_references(frames: dict, ce: int, n_ahead: int, context: int,
                            max_depth: float) -> dict[str, dict[str, np.ndarray]]:
    """Forecasts that use ground truth instead of the teacher, as fixed yardsticks:
    gt_copy_last repeats the true depth of the last context frame (invalid pixels, i.e. sky or
    beyond max_depth, read as max_depth); gt_const_vel repeats the true last context motion
    after the true context motions."""
    depth = frames["depth"][:, ce].astype(np.float64).copy()
    depth[depth <= 0] = max_depth
    motion = relative_poses(frames["pose"].astype(np.float64))
    lo = ce - context + 1
    return {"context": {"motion": motion[:, lo + 1:ce + 1]},
            "gt_copy_last": {"depth": np.repeat(depth[:, None], n_ahead, 1)},
            "gt_const_vel": {"motion": np.repeat(motion[:, ce:ce + 1], n_ahead, 1)}}


def score_split(split: str, preds: dict, frames: dict, ce: int, horizons: list[int],
                context: int, turn_deg: float) -> list[dict]:
    gt_depth, dyn, gt_pose = frames["depth"], frames["dynamic"], frames["pose"].astype(np.float64)
    lo = ce - context + 1
    # GT trajectory relative to the first context frame; "turning": |yaw change| over the window
    gt_rel = np.linalg.inv(gt_pose[:, lo:lo + 1]) @ gt_pose[:, lo:]
    yaw_change = rotation_angle_deg((np.linalg.inv(gt_pose[:, ce]) @ gt_pose[:, ce + max(horizons)])
                                    [:, :3, :3])
    turning = yaw_change > turn_deg
    ctx_traj = compose(np.broadcast_to(np.eye(4), (len(gt_pose), 4, 4)), preds["context"]["motion"])
    ctx_traj = np.concatenate([np.broadcast_to(np.eye(4), (len(gt_pose), 1, 4, 4)), ctx_traj], 1)
    rows = []
    for method, p in preds.items():
        if method == "context":
            continue
        traj = None
        if "motion" in p:
            traj = np.concatenate([ctx_traj, compose(ctx_traj[:, -1], p["motion"])], 1)
        for h in horizons:
            t = ce + h
            for n in range(len(gt_depth)):
                row = dict(split=split, method=method, horizon=h, seq=n, turning=bool(turning[n]),
                           yaw_change=float(yaw_change[n]))
                if "depth" in p:
                    valid = gt_depth[n, t] > 0
                    pred = median_scale(p["depth"][n, h - 1], gt_depth[n, t], valid)
                    row["absrel"], row["delta1"], _ = depth_errors(pred, gt_depth[n, t], valid)
                    row["absrel_static"], _, _ = depth_errors(pred, gt_depth[n, t], valid & ~dyn[n, t])
                    row["absrel_dynamic"], _, row["n_dynamic"] = depth_errors(
                        pred, gt_depth[n, t], valid & dyn[n, t])
                if traj is not None:
                    row.update(trajectory_errors(traj[n, :context + h], gt_rel[n, :context + h],
                                                 context))
                    pos = traj[n, :context + h, :3, 3]
                    row["jerk"] = float(np.linalg.norm(np.diff(pos, 3, axis=0), axis=1).mean()) \
                        if len(pos) > 3 else float("nan")
                rows.append(row)
    return rows


def probe_rows(preds: dict, frames: dict, teacher_last: np.ndarray, ce: int, horizons) -> list[dict]:
    """Stationary ego: relative depth change of each forecast vs the last context frame, in
    static and in dynamic pixels (GT masks at ce or ce+h)."""
    rows = []
    for method, p in preds.items():
        if "depth" not in p or method == "copy_last":
            continue
        for h in horizons:
            for n in range(len(teacher_last)):
                valid = (frames["depth"][n, ce] > 0) & (frames["depth"][n, ce + h] > 0)
                dynamic = frames["dynamic"][n, ce] | frames["dynamic"][n, ce + h]
                change = np.abs(p["depth"][n, h - 1] - teacher_last[n]) / teacher_last[n]
                rows.append(dict(method=method, horizon=h, seq=n,
                                 change_static=float(change[valid & ~dynamic].mean()),
                                 change_dynamic=float(change[valid & dynamic].mean())
                                 if (valid & dynamic).any() else float("nan")))
    return rows


def rollout_eval_stage(cfg, ctx) -> None:
    ev, fc, seed = cfg.evaluate, cfg.forecaster, ctx.item["seed"]
    teacher = load_teacher(ctx.inputs["pretrain_teacher"])
    tok_dir = ctx.inputs["extract_tokens"]
    token_dim = load_torch(tok_dir / "test.pt")["F"].shape[-1]
    fr3d = ctx.inputs["train_forecaster"]    # item_deps: this seed's folder
    paths = {"fr3d": fr3d[str(seed)] if isinstance(fr3d, dict) else fr3d}
    for key, path in ctx.inputs["train_baselines"].items():
        if key.endswith(f"-{seed}"):
            paths[key.rsplit("-", 1)[0]] = path
    models = {name: load_forecaster(path / "model.pt", fc, token_dim) for name, path in paths.items()}
    n_ahead = max(ev.horizons)
    rows, probe = [], []
    for i, split in enumerate((*EVAL_SPLITS, "probe")):
        tokens = load_torch(tok_dir / f"{split}.pt")
        frames = load_split(ctx.inputs["render"][split])
        preds = forecast_all(teacher, models, tokens, ev.context_end, n_ahead, fc.context,
                             ev.batch_size)
        if split != "probe":
            refs = ground_truth_references(frames, ev.context_end, n_ahead, fc.context,
                                           cfg.scenes.max_depth)
            rows += score_split(split, refs, frames, ev.context_end, ev.horizons, fc.context,
                                ev.turn_deg)
        if split == "probe":
            with torch.no_grad():
                last = teacher.decode_depth(tokens["F"][:, ev.context_end].float(),
                                            tuple(tokens["grid"])).numpy()
            probe = probe_rows(preds, frames, last, ev.context_end, ev.horizons)
        else:
            rows += score_split(split, preds, frames, ev.context_end, ev.horizons, fc.context,
                                ev.turn_deg)
        ctx.progress(i + 1, len(EVAL_SPLITS) + 1, f"evaluated {split}")
    import pandas as pd

    table = pd.DataFrame(rows)
    table["seed"] = seed
    write_table(ctx.out_dir / "scores.parquet", table)
    probe_table = pd.DataFrame(probe)
    probe_table["seed"] = seed
    write_table(ctx.out_dir / "probe.parquet", probe_table)
    summary = table.groupby(["split", "method", "horizon"])["absrel"].mean()
    ctx.write_metrics({f"absrel_{s}_{m}_h{h}": float(v) for (s, m, h), v in summary.items()
                       if np.isfinite(v) and h in (5, 10)})
