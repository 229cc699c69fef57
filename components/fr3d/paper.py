"""Paper-profile data and checks: which dataset feeds each split, and the early failure when a
path or a choice cannot work. Only a KITTI reader exists so far (components/fr3d/kitti.py);
a split sourced from nuScenes or Waymo fails preflight naming its key."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from components.common.preflight import PreflightError, require_dir
from components.common.readers import DatasetError
from components.fr3d import kitti
from components.fr3d.adapter import AdapterError, read_adapter_config

READERS = {"kitti": kitti}
KNOWN_DATASETS = ("kitti", "nuscenes", "waymo")
CHECKPOINT_LAYOUT = "a teacher checkpoint folder (adapter.json + weights.pt, see components/fr3d/adapter.py)"


def parse_source(spec: str) -> tuple[str, list[str]]:
    """``kitti`` -> ("kitti", []) (every drive); ``kitti:a,b`` -> ("kitti", ["a", "b"])."""
    name, _, drives = spec.partition(":")
    return name.strip(), [d.strip() for d in drives.split(",") if d.strip()]


def data_splits(cfg) -> list[str]:
    from components.fr3d.data import is_pretrain

    return [s for s in cfg.scenes.splits if not is_pretrain(s)]


def split_drives(cfg, split: str) -> tuple[str, Path, list[str]]:
    name, drives = parse_source(cfg.paper.sources[split])
    root = Path(getattr(cfg.paper, f"{name}_root")).expanduser()
    return name, root, drives or READERS[name].list_drives(root)


def preflight_paper(cfg) -> None:
    pc = cfg.paper
    path = require_dir("paper.cut3r_checkpoint", pc.cut3r_checkpoint, CHECKPOINT_LAYOUT,
                       ("adapter.json", "weights.pt"))
    try:
        read_adapter_config(path)
    except AdapterError as err:
        raise PreflightError("paper.cut3r_checkpoint", pc.cut3r_checkpoint, CHECKPOINT_LAYOUT,
                             f"is not usable ({err})") from None
    need = cfg.evaluate.context_end + max(cfg.evaluate.horizons) + 1
    if pc.clip_frames < need:
        raise PreflightError("paper.clip_frames", str(pc.clip_frames), f"at least {need}",
                             "is shorter than the context plus the longest horizon")
    if len(pc.image_size) != 2 or any(v <= 0 or v % 8 for v in pc.image_size):
        raise PreflightError("paper.image_size", str(pc.image_size),
                             "[H, W], both positive multiples of 8", "is not usable")
    seen: dict[tuple[str, str], str] = {}
    for split in data_splits(cfg):
        key = f"paper.sources.{split}"
        if split not in pc.sources:
            raise PreflightError(key, "", "kitti[:drive,...]", "is not set")
        name, drives = parse_source(pc.sources[split])
        if name not in READERS:
            raise PreflightError(key, pc.sources[split], "kitti[:drive,...]",
                                 f"names a dataset without a reader here (readers: "
                                 f"{', '.join(READERS)}; {', '.join(d for d in KNOWN_DATASETS if d not in READERS)} not written yet)")
        root_key = f"paper.{name}_root"
        reader = READERS[name]
        root = require_dir(root_key, getattr(pc, f"{name}_root"), reader.LAYOUT,
                           ("*/image_02/data/*.png",))
        for drive in drives or reader.list_drives(root):
            if not (root / drive / kitti.IMAGE_DIR).is_dir():
                raise PreflightError(key, pc.sources[split], reader.LAYOUT,
                                     f"names drive {drive!r}, not a drive folder under {root_key}")
            try:
                n_clips = len(reader.drive_clips(root / drive, pc.clip_frames, pc.frame_stride))
            except DatasetError as err:
                raise PreflightError(root_key, str(root), reader.LAYOUT,
                                     f"is not usable ({err})") from None
            if not n_clips:
                raise PreflightError(key, pc.sources[split], f"drives with {pc.clip_frames} "
                                     f"frames {pc.frame_stride} apart", f"drive {drive!r} has none")
            if (name, drive) in seen:
                raise PreflightError(key, pc.sources[split], "drives no other split reads",
                                     f"shares drive {drive!r} with paper.sources.{seen[name, drive]}")
            seen[name, drive] = split


def paper_clip_index(cfg) -> dict[str, list[dict]]:
    """Per split: the clips to read, as (dataset, drive, frame ids)."""
    pc, index = cfg.paper, {}
    for split in data_splits(cfg):
        name, root, drives = split_drives(cfg, split)
        index[split] = [dict(dataset=name, drive=d, frames=clip) for d in drives
                        for clip in READERS[name].drive_clips(root / d, pc.clip_frames,
                                                              pc.frame_stride)]
        if not index[split]:
            raise ValueError(f"paper.sources.{split}: no clip of {pc.clip_frames} frames "
                             f"{pc.frame_stride} apart in {drives}")
    return index


def read_paper_clips(cfg, records: list[dict]) -> list[dict]:
    size = tuple(cfg.paper.image_size)
    out = []
    for rec in records:
        root = Path(getattr(cfg.paper, f"{rec['dataset']}_root")).expanduser()
        out.append(READERS[rec["dataset"]].read_clip(root / rec["drive"], rec["frames"], size,
                                                     cfg.scenes.max_depth))
    return out


def stack_clips(clips: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.stack([c[k] for c in clips]) for k in clips[0]}
