"""KITTI reader for the paper profile: clips of RGB, metric depth and camera poses from a user
root in KITTI's published layout, resized to the teacher's input size.

Layout under the root (one folder per raw drive, as the raw data and the depth benchmark
name them, e.g. ``2011_09_26_drive_0002_sync``):
- ``<drive>/image_02/data/<frame>.png``                 left colour camera (raw layout);
- ``<drive>/proj_depth/groundtruth/image_02/<frame>.png`` depth benchmark maps: uint16,
  metres x 256, 0 = no measurement;
- ``<drive>/poses.txt``  one line per image_02 frame, 12 numbers: the row-major 3x4
  camera-to-world pose (the odometry benchmark's ``poses/<seq>.txt`` format);
- ``calib_cam_to_cam.txt`` in the drive folder or its parent (the raw date folder), whose
  ``P_rect_02`` gives the focal length, hence the field of view.
Only frames with both an image and a depth map are used (the depth benchmark drops each
drive's first and last frames). KITTI has no dynamic-object masks: ``dynamic`` is all False.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from components.common.readers import DatasetError

IMAGE_DIR = Path("image_02/data")
DEPTH_DIR = Path("proj_depth/groundtruth/image_02")
POSES_FILE, CALIB_FILE = "poses.txt", "calib_cam_to_cam.txt"
LAYOUT = ("<drive>/image_02/data/*.png, <drive>/proj_depth/groundtruth/image_02/*.png, "
          "<drive>/poses.txt (KITTI raw drives + depth benchmark + odometry-format poses)")


def list_drives(root) -> list[str]:
    drives = sorted(p.name for p in Path(root).iterdir() if (p / IMAGE_DIR).is_dir())
    if not drives:
        raise DatasetError(f"{root}: no drive folders with {IMAGE_DIR}/ (expected {LAYOUT})")
    return drives


def read_poses(path: Path) -> np.ndarray:
    try:
        rows = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except (OSError, ValueError) as err:
        raise DatasetError(f"{path}: not a pose file ({err})") from None
    if rows.shape[1] != 12:
        raise DatasetError(f"{path}: expected 12 numbers per line, got {rows.shape[1]}")
    poses = np.tile(np.eye(4), (len(rows), 1, 1))
    poses[:, :3, :4] = rows.reshape(-1, 3, 4)
    return poses


def read_focal(drive_dir: Path) -> float:
    for folder in (drive_dir, drive_dir.parent):
        path = folder / CALIB_FILE
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.startswith("P_rect_02:"):
                    return float(line.split()[1])
            raise DatasetError(f"{path}: no P_rect_02 line")
    raise DatasetError(f"{drive_dir}: no {CALIB_FILE} in the drive or its parent folder")


def frame_ids(drive_dir: Path) -> list[int]:
    """Frame numbers that have both an image and a depth map."""
    images = {int(p.stem) for p in (drive_dir / IMAGE_DIR).glob("*.png")}
    depths = {int(p.stem) for p in (drive_dir / DEPTH_DIR).glob("*.png")}
    if not depths:
        raise DatasetError(f"{drive_dir / DEPTH_DIR}: no depth maps (expected {LAYOUT})")
    return sorted(images & depths)


def drive_clips(drive_dir: Path, n_frames: int, stride: int) -> list[list[int]]:
    """Non-overlapping clips of ``n_frames`` frames ``stride`` apart, all present."""
    ids = set(frame_ids(drive_dir))
    clips, start = [], min(ids) if ids else 0
    while ids and start <= max(ids):
        clip = [start + k * stride for k in range(n_frames)]
        if all(i in ids for i in clip):
            clips.append(clip)
            start = clip[-1] + stride
        else:
            start += 1
    return clips


def _image(path: Path, size: tuple[int, int]) -> tuple[np.ndarray, int]:
    from PIL import Image

    with Image.open(path) as im:
        width = im.width
        return np.asarray(im.convert("RGB").resize(size[::-1], Image.BILINEAR)), width


def _depth(path: Path, size: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize (sparse LiDAR depth must not be blended with empty pixels)."""
    from PIL import Image

    with Image.open(path) as im:
        raw = np.asarray(im, dtype=np.float32)
    rows = ((np.arange(size[0]) + 0.5) * raw.shape[0] / size[0]).astype(int)
    cols = ((np.arange(size[1]) + 0.5) * raw.shape[1] / size[1]).astype(int)
    return raw[rows][:, cols] / 256.0


def read_clip(drive_dir: Path, clip: list[int], size: tuple[int, int], max_depth: float) -> dict:
    """One clip as the render stage's arrays: rgb, depth (0 = invalid), dynamic, pose, fov."""
    poses = read_poses(drive_dir / POSES_FILE)
    if max(clip) >= len(poses):
        raise DatasetError(f"{drive_dir / POSES_FILE}: {len(poses)} poses, frame {max(clip)} needed")
    names = {int(p.stem): p.name for p in (drive_dir / IMAGE_DIR).glob("*.png")}
    rgb, depth = [], []
    for i in clip:
        image, width = _image(drive_dir / IMAGE_DIR / names[i], size)
        rgb.append(image)
        d = _depth(drive_dir / DEPTH_DIR / names[i], size)
        depth.append(np.where(d <= max_depth, d, 0.0))
    fov = np.degrees(2 * np.arctan(width / 2 / read_focal(drive_dir)))
    depth = np.stack(depth).astype(np.float32)
    return dict(rgb=np.stack(rgb).astype(np.uint8), depth=depth, dynamic=np.zeros(depth.shape, bool),
                pose=poses[clip].astype(np.float32), fov=np.float32(fov))
