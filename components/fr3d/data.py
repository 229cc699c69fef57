"""gen_scenes and render: procedural scenes per split, then RGB / metric depth / dynamic masks /
ego poses. Splits: train (domain A), val (domain A, for premise checks, calibration and
convergence; never reported as a result), test (A-test), kitti_like (B), nuscenes_like (C),
probe (A settings with a stationary ego, for the disentanglement probe), pretrain (the teacher's
broad randomised renders: random fov, image shape, palette, traffic; B/C shapes excluded)."""
from __future__ import annotations

import numpy as np

from components.common.io import (load_npz, load_torch, read_json, save_npz, save_torch,
                                  write_json_atomic)
from components.fr3d.paper import paper_clip_index, read_paper_clips, stack_clips
from components.fr3d.scenes import PALETTES, random_palette, render_sequence, sample_scene

DOMAIN_SPLITS = ("train", "val", "test", "kitti_like", "nuscenes_like")
EVAL_SPLITS = ("test", "kitti_like", "nuscenes_like")
PRETRAIN = "pretrain"


def is_pretrain(split: str) -> bool:
    """The teacher's pre-training set is rendered in shards ``pretrain_0``, ``pretrain_1``, ...
    (one render fan-out item each, so the two workers share its rendering); ``pretrain`` alone
    is one shard."""
    return split == PRETRAIN or split.startswith(PRETRAIN + "_")


def pretrain_shard(sc, split: str) -> tuple[int, int]:
    """(index, count) of a pre-training shard among ``scenes.splits``."""
    shards = [s for s in sc.splits if is_pretrain(s)]
    return shards.index(split), len(shards)


def domain_of(scenes_cfg, split: str):
    return getattr(scenes_cfg, "train" if split in ("probe", "val") else split)


def n_sequences(sc, split: str) -> int:
    if split == "probe":
        return sc.probe_seq
    return sc.val_seq if split == "val" else domain_of(sc, split).n_seq


def make_split(sc, split: str, rng: np.random.Generator) -> list[dict]:
    """Scene records of one split: the scene arrays plus how to render them."""
    records = []
    if is_pretrain(split):
        for _ in range(sc.pretrain_seq):
            h, w = sc.pretrain_shapes[rng.integers(len(sc.pretrain_shapes))]
            speed = 0.0 if rng.random() < 0.1 else float(rng.uniform(2.0, 12.0))
            scene = sample_scene(rng, n_frames=sc.pretrain_frames, fps=sc.fps, speed=speed,
                                 turn_prob=float(rng.uniform(0.2, 0.9)),
                                 cars_per_100m=float(rng.uniform(0.0, 10.0)),
                                 turn_radius_range=sc.turn_radius_range,
                                 first_straight_range=sc.first_straight_range)
            records.append(dict(scene=scene, height=int(h), width=int(w),
                                fov_deg=float(rng.uniform(*sc.pretrain_fov_range)),
                                palette=random_palette(rng)))
        return records
    dom = domain_of(sc, split)
    for _ in range(n_sequences(sc, split)):
        speed = 0.0 if split == "probe" else float(rng.uniform(*sc.speed_range))
        scene = sample_scene(rng, n_frames=dom.n_frames, fps=sc.fps, speed=speed,
                             turn_prob=dom.turn_prob, cars_per_100m=dom.cars_per_100m,
                             turn_radius_range=sc.turn_radius_range,
                             first_straight_range=sc.first_straight_range)
        records.append(dict(scene=scene, height=dom.height, width=dom.width, fov_deg=dom.fov_deg,
                            palette=PALETTES[dom.palette]))
    return records


def gen_scenes_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:
        return index_paper_clips(cfg, ctx)
    sc = cfg.scenes
    summary = {}
    for i, split in enumerate(sc.splits):
        if is_pretrain(split) and pretrain_shard(sc, split)[0]:
            continue                    # one scene set for all shards (the first shard's seed)
        rng = np.random.default_rng([sc.data_seed, i])
        name = PRETRAIN if is_pretrain(split) else split
        records = make_split(sc, split, rng)
        save_torch(ctx.out_dir / f"{name}.pt", records)
        summary[f"n_seq_{name}"] = len(records)
        ctx.progress(i + 1, len(sc.splits), f"scenes {split}")
    ctx.write_metrics(summary)


def index_paper_clips(cfg, ctx) -> None:
    """Paper profile: the clips each split reads from the user's dataset roots."""
    index = paper_clip_index(cfg)
    for split, records in index.items():
        write_json_atomic(ctx.out_dir / f"{split}.json", records)
    ctx.write_metrics({f"n_seq_{split}": len(records) for split, records in index.items()})


def read_paper_split(cfg, ctx) -> None:
    """Paper profile: the split's clips read and resized into the render stage's arrays."""
    split = ctx.item["split"]
    clips = read_paper_clips(cfg, read_json(ctx.inputs["gen_scenes"] / f"{split}.json"))
    arrays = stack_clips(clips)
    h, w = arrays["rgb"].shape[2:4]
    save_npz(ctx.out_dir / f"{h}x{w}.npz", **arrays)
    write_json_atomic(ctx.out_dir / "manifest.json", [dict(
        height=int(h), width=int(w), n_seq=len(clips),
        fovs=sorted({round(float(f), 6) for f in arrays["fov"]}))])
    depth = arrays["depth"]
    ctx.write_metrics({"n_seq": len(clips), "valid_share": float((depth > 0).mean()),
                       "dynamic_share": 0.0, "mean_depth": float(depth[depth > 0].mean())})


def render_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:
        return read_paper_split(cfg, ctx)
    sc, split = cfg.scenes, ctx.item["split"]
    if is_pretrain(split):
        k, n = pretrain_shard(sc, split)
        records = load_torch(ctx.inputs["gen_scenes"] / f"{PRETRAIN}.pt")[k::n]
    else:
        records = load_torch(ctx.inputs["gen_scenes"] / f"{split}.pt")
    groups: dict[tuple[int, int], list] = {}
    for i, rec in enumerate(records):
        out = render_sequence(rec["scene"], height=rec["height"], width=rec["width"],
                              fov_deg=rec["fov_deg"], palette=rec["palette"],
                              cam_height=sc.cam_height, cam_pitch_deg=sc.cam_pitch_deg,
                              max_depth=sc.max_depth)
        out["fov"] = np.float32(rec["fov_deg"])
        groups.setdefault((rec["height"], rec["width"]), []).append(out)
        if (i + 1) % 50 == 0:
            ctx.progress(i + 1, len(records), f"render {split}")
    manifest = []
    for (h, w), outs in sorted(groups.items()):
        arrays = {k: np.stack([o[k] for o in outs]) for k in outs[0]}
        save_npz(ctx.out_dir / f"{h}x{w}.npz", **arrays)
        manifest.append(dict(height=h, width=w, n_seq=len(outs),
                             fovs=sorted({round(float(o["fov"]), 6) for o in outs})))
    write_json_atomic(ctx.out_dir / "manifest.json", manifest)
    depth = np.concatenate([np.stack([o["depth"] for o in outs]).ravel() for outs in groups.values()])
    dyn = np.concatenate([np.stack([o["dynamic"] for o in outs]).ravel() for outs in groups.values()])
    ctx.write_metrics({"n_seq": len(records), "valid_share": float((depth > 0).mean()),
                       "dynamic_share": float(dyn.mean()),
                       "mean_depth": float(depth[depth > 0].mean())})


def load_split(render_dir) -> dict[str, np.ndarray]:
    """The single shape group of a domain split (train/test/kitti_like/nuscenes_like/probe)."""
    files = sorted(p for p in render_dir.glob("*.npz"))
    if len(files) != 1:
        raise ValueError(f"{render_dir}: expected one image shape, found {[f.name for f in files]}")
    return load_npz(files[0])
