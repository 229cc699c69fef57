"""Tiny KITTI-layout folders (generated): raw drives with image_02 PNGs, depth-benchmark depth
PNGs, odometry-format poses and a raw calib file in the date folder."""
from __future__ import annotations

from pathlib import Path

import numpy as np

FOCAL = 30.0


def write_kitti_drive(date_dir: Path, name: str, n_frames: int, size=(24, 80), seed: int = 0,
                      speed: float = 1.0, yaw_rate: float = 0.02) -> Path:
    from PIL import Image

    rng = np.random.default_rng(seed)
    drive = Path(date_dir) / name
    (drive / "image_02/data").mkdir(parents=True, exist_ok=True)
    (drive / "proj_depth/groundtruth/image_02").mkdir(parents=True, exist_ok=True)
    h, w = size
    rows = []
    for i in range(n_frames):
        stem = f"{i:010d}.png"
        shift = int(i * speed * 2)
        base = np.linspace(0, 255, w)[None, :, None] + np.linspace(0, 120, h)[:, None, None]
        image = (np.roll(base, shift, axis=1) + rng.integers(0, 30, (h, w, 3))) % 256
        Image.fromarray(image.astype(np.uint8)).save(drive / "image_02/data" / stem)
        depth = np.linspace(40, 3, h)[:, None].repeat(w, 1) + rng.uniform(0, 1, (h, w))
        depth[rng.random((h, w)) < 0.7] = 0.0          # sparse, like projected LiDAR
        Image.fromarray((depth * 256).astype(np.uint16)).save(
            drive / "proj_depth/groundtruth/image_02" / stem)
        yaw = yaw_rate * i
        pose = np.eye(4)[:3]
        pose[:, :3] = [[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]]
        pose[:, 3] = [0.0, 0.0, speed * i]
        rows.append(" ".join(f"{v:.6e}" for v in pose.ravel()))
    (drive / "poses.txt").write_text("\n".join(rows) + "\n")
    return drive


def write_kitti_root(root: Path, drives: list[str], n_frames: int = 17, size=(24, 80)) -> Path:
    """``root/<drive>/...`` plus ``root/calib_cam_to_cam.txt`` (a raw date folder)."""
    root = Path(root)
    for k, name in enumerate(drives):
        write_kitti_drive(root, name, n_frames, size, seed=k, speed=0.0 if "still" in name else 1.0)
    (root / "calib_cam_to_cam.txt").write_text(
        f"calib_time: 09-Jan-2012 13:57:47\nP_rect_02: {FOCAL:e} 0 {size[1] / 2:e} 0 0 "
        f"{FOCAL:e} {size[0] / 2:e} 0 0 0 1 0\n")
    return root
