"""Video anomaly data sets in their published on-disk layouts (paper profile).

- UCF-Crime (Sultani et al. 2018): split lists ``Anomaly_Train.txt`` / ``Anomaly_Test.txt``
  anywhere under the root, one relative video path per line (``Abuse/Abuse001_x264.mp4``,
  ``Training_Normal_Videos_Anomaly/Normal_Videos003_x264.mp4``); the class is the first path
  component (the two normal folders mean Normal). The optional
  ``Temporal_Anomaly_Annotation_for_Testing_Videos.txt`` (``name class s1 e1 s2 e2``, frames,
  -1 for none) is read for analysis only.
- XD-Violence (Wu et al. 2020): ``train/`` and ``test/`` folders of videos whose names end in
  ``_label_<codes>`` (A normal, B1 fighting, B2 shooting, B4 riot, B5 abuse, B6 car accident,
  G explosion; the first code is the video-level class).

A video is either a video file (mp4, avi...; decoded through PyAV) or a folder of pre-extracted
frames with the video's name minus its extension (``Abuse/Abuse001_x264/00001.jpg``...), both
read by the shared reader ``components.common.video``. Frames are sampled at ``n_frames``
uniform positions over the whole video and resized to a square.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from components.common.video import read_video

UCF_CLASSES = ("Normal", "Abuse", "Arrest", "Arson", "Assault", "Burglary", "Explosion", "Fighting",
               "RoadAccidents", "Robbery", "Shooting", "Shoplifting", "Stealing", "Vandalism")
XD_CODES = {"A": "Normal", "B1": "Fighting", "B2": "Shooting", "B4": "Riot", "B5": "Abuse",
            "B6": "Car accident", "G": "Explosion"}
XD_CLASSES = tuple(XD_CODES.values())
UCF_NORMAL_FOLDERS = ("Training_Normal_Videos_Anomaly", "Testing_Normal_Videos_Anomaly")
UCF_SPLIT_FILES = {"train": "Anomaly_Train.txt", "test": "Anomaly_Test.txt"}
LAYOUTS = {
    "ucf_crime": ("a UCF-Crime folder: Anomaly_Train.txt and Anomaly_Test.txt (relative video paths "
                  "such as Abuse/Abuse001_x264.mp4) and the videos (or frame folders of the same "
                  "name) under the root or its Videos/ folder"),
    "xd_violence": ("an XD-Violence folder: train/ and test/ holding videos (or frame folders) "
                    "named *_label_<codes>, e.g. name__#00-01_label_B1-0-0.mp4"),
}


class VideoDataError(ValueError):
    """A data set folder or video that does not match the published layout (message names it)."""


def classes_of(dataset: str) -> tuple[str, ...]:
    return {"ucf_crime": UCF_CLASSES, "xd_violence": XD_CLASSES}[dataset]


# -- listing --------------------------------------------------------------------------------------
def find_one(root: Path, name: str) -> Path | None:
    hits = sorted(root.rglob(name))
    return hits[0] if hits else None


def resolve_video(root: Path, list_file: Path, rel: str) -> Path:
    """The video file or frame folder a split list names, looked up where releases put it."""
    rel_path = Path(rel)
    for base in (root, root / "Videos", list_file.parent, list_file.parent.parent):
        for candidate in (base / rel_path, base / rel_path.with_suffix("")):
            if candidate.exists():
                return candidate
    raise VideoDataError(f"{list_file}: video {rel!r} not found under {root} (nor its Videos/ "
                         "folder), as a file or a frame folder")


def ucf_class(rel: str) -> str:
    folder = Path(rel).parts[0]
    if folder in UCF_NORMAL_FOLDERS or folder.startswith("Normal"):
        return "Normal"
    if folder not in UCF_CLASSES:
        raise VideoDataError(f"UCF-Crime entry {rel!r}: class folder {folder!r} is not one of "
                             f"{', '.join(UCF_CLASSES)}")
    return folder


def ucf_temporal(root: Path) -> dict[str, tuple[int, int]]:
    """Analysis only: first annotated anomaly window per test video (frames), if the file exists."""
    path = find_one(root, "Temporal_Anomaly_Annotation*.txt")
    out: dict[str, tuple[int, int]] = {}
    if path is None:
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4:
            out[Path(parts[0]).stem] = (int(parts[2]), int(parts[3]))
    return out


def list_ucf_crime(root: Path) -> dict[str, list[dict]]:
    temporal = ucf_temporal(root)
    splits = {}
    for split, name in UCF_SPLIT_FILES.items():
        list_file = find_one(root, name)
        if list_file is None:
            raise VideoDataError(f"{root}: no {name} (expected {LAYOUTS['ucf_crime']})")
        rows = []
        for rel in (line.strip() for line in list_file.read_text().splitlines()):
            if rel:
                stem = Path(rel).stem
                start, end = temporal.get(stem, (-1, -1))
                rows.append({"name": stem, "path": str(resolve_video(root, list_file, rel)),
                             "label_name": ucf_class(rel), "event_start_frame": start,
                             "event_end_frame": end})
        splits[split] = rows
    return splits


def xd_class(name: str) -> str:
    match = re.search(r"_label_([A-Z][0-9]?)", name)
    if match is None or match.group(1) not in XD_CODES:
        raise VideoDataError(f"XD-Violence video {name!r}: no _label_<code> with a code in "
                             f"{', '.join(XD_CODES)}")
    return XD_CODES[match.group(1)]


def list_xd_violence(root: Path) -> dict[str, list[dict]]:
    splits = {}
    for split in ("train", "test"):
        folder = root / split
        if not folder.is_dir():
            raise VideoDataError(f"{root}: no {split}/ folder (expected {LAYOUTS['xd_violence']})")
        entries = sorted(p for p in folder.iterdir() if "_label_" in p.name)
        splits[split] = [{"name": p.stem if p.is_file() else p.name, "path": str(p),
                          "label_name": xd_class(p.name), "event_start_frame": -1,
                          "event_end_frame": -1} for p in entries]
    return splits


def list_videos(dataset: str, root: str | Path) -> dict[str, list[dict]]:
    if dataset not in LAYOUTS:
        raise VideoDataError(f"paper.dataset = {dataset!r}: choose one of {', '.join(LAYOUTS)}")
    root = Path(root).expanduser()
    return list_ucf_crime(root) if dataset == "ucf_crime" else list_xd_violence(root)


def split_train_val(rows: list[dict], val_share: float, seed: int) -> tuple[list[dict], list[dict]]:
    """A seeded share of the training list becomes validation (the data sets publish none)."""
    order = np.random.default_rng(seed).permutation(len(rows))
    n_val = int(round(val_share * len(rows)))
    val = sorted(order[:n_val].tolist())
    train = sorted(order[n_val:].tolist())
    return [rows[i] for i in train], [rows[i] for i in val]


def cap(rows: list[dict], limit: int, seed: int) -> list[dict]:
    """At most ``limit`` videos (0 = all), a seeded subset in list order."""
    if not limit or len(rows) <= limit:
        return rows
    keep = np.sort(np.random.default_rng(seed).choice(len(rows), limit, replace=False))
    return [rows[i] for i in keep]


# -- decoding -------------------------------------------------------------------------------------
def decode_frames(path: str | Path, n_frames: int, size: int) -> np.ndarray:
    """(n_frames, size, size, 3) uint8 frames at uniform positions over the whole video (a video
    file, decoded by PyAV, or a frame folder): ``components.common.video.read_video``, which
    raises ``VideoReadError`` naming the file."""
    return read_video(path, n_frames=n_frames, size=size)


def frame_saliency(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame static saliency (distance to the video's median frame) and motion saliency
    (difference to the next frame), each scaled to [0, 1] within the video. They play the role
    of the small profile's saliency cache for the warm-start script and the policy features."""
    x = frames.astype(np.float32) / 255.0
    static = np.abs(x - np.median(x, axis=0, keepdims=True)).mean(axis=(1, 2, 3))
    motion = np.zeros(len(x), np.float32)
    motion[:-1] = np.abs(np.diff(x, axis=0)).mean(axis=(1, 2, 3))
    scale = lambda v: v / v.max() if v.max() > 0 else v  # noqa: E731
    return scale(static), scale(motion)
