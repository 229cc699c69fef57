"""fr3d's paper profile end to end (DVC + Prefect + MLflow) on generated KITTI-layout drives and
a tiny random teacher saved as an adapter checkpoint, with steps shrunk by --set."""
import math

import pytest

from components.common.io import read_json, read_table
from components.fr3d.adapter import save_teacher_checkpoint
from components.fr3d.teacher import TinyCUT3R
from tests.fr3d.kitti_layout import write_kitti_root
from tests.paper.harness import run_paper_shape

# slow-marked to keep the CI run under 30 minutes (it ran there at 40-55 s); `make test-all` runs it
pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]

SPLITS = ("train", "val", "test", "kitti_like", "nuscenes_like", "probe")
SHRINK = [
    "seeds=[0]", "paper.image_size=[16,48]", "paper.frame_stride=1", "paper.clip_frames=16",
    "forecaster.dim=16", "forecaster.spatial_layers=1", "forecaster.pose_layers=1",
    "forecaster.share_layers=1", "forecaster.heads=2", "forecaster.steps=4",
    "forecaster.batch_size=2", "forecaster.warmup=1", "forecaster.rollout=2",
    "forecaster.log_every=2", "forecaster.eval_every_logs=1", "forecaster.decoder_steps=2",
    "forecaster.lr=0.001", "evaluate.batch_size=4",
]


def tiny_teacher_checkpoint(folder):
    model = TinyCUT3R(dim=16, state_tokens=4, heads=2)
    return save_teacher_checkpoint(model, folder, "tiny_cut3r", dim=16, state_tokens=4, heads=2)


def test_fr3d_paper_profile_on_kitti_layout_and_adapter_teacher(tmp_path):
    drives = {s: f"2011_09_26_drive_{i:04d}_sync" if s != "probe" else "2011_09_26_drive_still_sync"
              for i, s in enumerate(SPLITS)}
    kitti = write_kitti_root(tmp_path / "kitti" / "2011_09_26", list(drives.values()))
    teacher = tiny_teacher_checkpoint(tmp_path / "teacher")
    sets = SHRINK + [f"paper.cut3r_checkpoint={teacher}", f"paper.kitti_root={kitti}"] + [
        f"paper.sources.{s}=kitti:{d}" for s, d in drives.items()]
    result = run_paper_shape("fr3d", tmp_path / "project", sets)

    assert result.metrics("fr3d", "gen_scenes")["n_seq_kitti_like"] == 1
    render = result.metrics("fr3d", "render", "kitti_like")
    assert 0 < render["valid_share"] < 0.6 and render["dynamic_share"] == 0.0
    ref = read_json(result.out("fr3d", "pretrain_teacher") / "teacher_ref.json")
    assert ref["adapter"] == "tiny_cut3r"
    assert result.metrics("fr3d", "extract_tokens")["n_tokens_kitti_like"] == 2 * 6
    scores = read_table(result.out("fr3d", "rollout_eval", "0") / "scores.parquet").to_pandas()
    assert set(scores.split) == {"test", "kitti_like", "nuscenes_like"}
    assert {"oracle", "copy_last", "fr3d", "no_share", "gt_copy_last"} <= set(scores.method)
    depth = scores.dropna(subset=["absrel"])
    assert depth.absrel.map(math.isfinite).all() and depth.delta1.between(0, 1).all()
    assert scores.dropna(subset=["ate"]).ate.map(math.isfinite).all()
    assert (result.out("fr3d", "report") / "criteria.json").exists()
