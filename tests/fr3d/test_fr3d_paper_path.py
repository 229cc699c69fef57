"""fr3d paper path pieces: the teacher adapter, the KITTI reader and the paper preflight."""
import numpy as np
import pytest
import torch

from components.common.preflight import PreflightError
from components.fr3d.adapter import (AdapterError, check_teacher, load_teacher_checkpoint,
                                     save_teacher_checkpoint)
from components.fr3d.config import Fr3dConfig
from components.fr3d.kitti import drive_clips, read_clip
from components.fr3d.teacher import TinyCUT3R
from tests.fr3d.kitti_layout import FOCAL, write_kitti_root

DRIVES = ["d_train", "d_val", "d_test", "d_kitti", "d_nusc", "d_still"]
SPLITS = ["train", "val", "test", "kitti_like", "nuscenes_like", "probe"]


def tiny_checkpoint(folder):
    torch.manual_seed(0)
    model = TinyCUT3R(dim=16, state_tokens=4, heads=2)
    save_teacher_checkpoint(model, folder, "tiny_cut3r", dim=16, state_tokens=4, heads=2)
    return model


def test_tiny_teacher_round_trips_through_the_adapter(tmp_path):
    model = tiny_checkpoint(tmp_path / "ckpt").eval()
    loaded = load_teacher_checkpoint(tmp_path / "ckpt")
    check_teacher(loaded)
    rgb = torch.rand(2, 3, 3, 16, 24)
    with torch.no_grad():
        (z, f, enc), (z2, f2, enc2) = model(rgb), loaded(rgb)
        for a, b in ((z, z2), (f, f2), (enc, enc2)):    # same weights (kernels may differ in ulps)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        grid = (16 // loaded.patch, 24 // loaded.patch)
        assert loaded.decode_depth(f2[:, 0], grid).shape == (2, 16, 24)
        assert loaded.decode_pose(z2).shape == (2, 3, 4, 4)
    assert not any(p.requires_grad for p in loaded.parameters())


def test_cut3r_slot_refuses_without_its_code(tmp_path):
    save_teacher_checkpoint(torch.nn.Linear(1, 1), tmp_path / "c", "cut3r")
    with pytest.raises(AdapterError, match="CUT3R's model code"):
        load_teacher_checkpoint(tmp_path / "c")


def test_kitti_reader_decodes_depth_pose_and_fov(tmp_path):
    root = write_kitti_root(tmp_path / "2011_09_26", ["drive_a"], n_frames=9, size=(24, 80))
    clips = drive_clips(root / "drive_a", n_frames=4, stride=2)
    assert clips == [[0, 2, 4, 6]]                      # 8 is left over, no overlap
    clip = read_clip(root / "drive_a", clips[0], (24, 80), max_depth=60.0)
    assert clip["rgb"].shape == (4, 24, 80, 3) and clip["rgb"].dtype == np.uint8
    valid = clip["depth"] > 0
    assert 0.1 < valid.mean() < 0.5                      # sparse like LiDAR
    assert clip["depth"][valid].min() >= 3 and clip["depth"][valid].max() <= 41.1   # metres
    assert np.allclose(clip["pose"][:, 2, 3], [0, 2, 4, 6])     # speed 1 m per frame
    assert clip["fov"] == pytest.approx(np.degrees(2 * np.arctan(40 / FOCAL)), rel=1e-5)
    assert not clip["dynamic"].any()


def paper_cfg(tmp_path, **paper):
    root = tmp_path / "kitti"
    if not root.exists():
        write_kitti_root(root, DRIVES, n_frames=17, size=(24, 80))
        tiny_checkpoint(tmp_path / "ckpt")
    sources = {s: f"kitti:{d}" for s, d in zip(SPLITS, DRIVES)} | paper.pop("sources", {})
    return Fr3dConfig.for_profile("paper", {"paper": {
        "cut3r_checkpoint": str(tmp_path / "ckpt"), "kitti_root": str(root), "sources": sources,
        "image_size": [16, 48], "frame_stride": 1} | paper})


def test_paper_preflight_accepts_kitti_layout_and_names_failing_keys(tmp_path):
    paper_cfg(tmp_path).preflight()
    cases = [({"sources": {"train": "waymo"}}, "paper.sources.train"),
             ({"kitti_root": str(tmp_path / "nowhere")}, "paper.kitti_root"),
             ({"cut3r_checkpoint": ""}, "paper.cut3r_checkpoint"),
             ({"image_size": [15, 48]}, "paper.image_size"),
             ({"sources": {"probe": "kitti:d_test"}}, "paper.sources.probe"),
             ({"sources": {"val": "kitti:no_such_drive"}}, "paper.sources.val"),
             ({"clip_frames": 40}, "paper.sources.train")]      # 17-frame drives: no clip
    for override, key in cases:
        with pytest.raises(PreflightError) as err:
            paper_cfg(tmp_path, **override).preflight()
        message = str(err.value)
        assert message.startswith(key) and "\n" not in message


def test_default_paper_profile_fails_on_the_checkpoint_key():
    with pytest.raises(PreflightError, match=r"^paper\.cut3r_checkpoint = '' is not set"):
        Fr3dConfig.for_profile("paper").preflight()
