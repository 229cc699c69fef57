"""Science of the fr3d components: renderer geometry, metrics, pose alignment, forecaster
invariants. Small synthetic fixtures, no runtime."""
import numpy as np
import pytest
import torch

from components.fr3d import geometry as geo
from components.fr3d.scenes import (PALETTES, camera_pose, make_road, ray_box, ray_dirs,
                                    render_sequence, sample_scene)

torch.set_num_threads(1)
RENDER = dict(palette=PALETTES["day"], cam_height=1.5, cam_pitch_deg=0.0, max_depth=60.0)


def _scene(boxes, n_frames=3, speed=0.0, cars=None):
    road = make_road([(200.0, 0.0)])
    s = 10.0 + speed * np.arange(n_frames) / 5.0
    cars = np.zeros((n_frames, 0, 3)) if cars is None else cars
    return dict(road_s=road.s, road_x=road.x, road_z=road.z, road_yaw=road.yaw,
                ego_x=np.zeros(n_frames), ego_z=s, ego_yaw=np.zeros(n_frames),
                boxes=np.asarray(boxes, dtype=float).reshape(-1, 8), cars=cars,
                car_colour=np.full((cars.shape[1], 1), 0.5),
                building_colour=np.full((len(boxes), 1), 0.5))


def test_ray_box_matches_analytic_intersection():
    # an axis-aligned box 10 m ahead; the central ray enters its front face at z = 10 - 1
    origin = np.zeros(3)
    dirs = np.array([[0.0, 0.0, 1.0], [0.2, 0.0, 1.0], [5.0, 0.0, 1.0]])
    t, axis = ray_box(origin, dirs, np.array([[0.0, 0.0, 10.0]]), np.array([[2.0, 2.0, 1.0]]),
                      np.array([0.0]))
    assert t[0, 0] == pytest.approx(9.0) and axis[0, 0] == 2
    assert t[1, 0] == pytest.approx(9.0)          # x = 1.8 at z = 9: still the front face
    assert np.isinf(t[2, 0])                      # misses
    # rotated by 90 deg the box's x half-extent faces the camera
    t, _ = ray_box(origin, dirs[:1], np.array([[0.0, 0.0, 10.0]]), np.array([[2.0, 2.0, 1.0]]),
                   np.array([np.pi / 2]))
    assert t[0, 0] == pytest.approx(8.0)


def test_rendered_depth_equals_ground_and_box_geometry():
    h, w, fov = 16, 24, 60.0
    # box straight ahead on the road: centre z = ego + 20, half depth 1 -> face at 19 m
    box = (0.0, -2.0, 30.0, 1.5, 2.0, 1.0, 0.0, 0)
    out = render_sequence(_scene([box]), height=h, width=w, fov_deg=fov, **RENDER)
    depth = out["depth"][0]
    dirs = ray_dirs(h, w, fov).reshape(h, w, 3)
    # bottom row: ground plane y = 0 seen from height 1.5 (pitch 0) -> t = 1.5 / dir_y
    assert np.allclose(depth[-1], 1.5 / dirs[-1, :, 1], rtol=1e-5)
    # central pixels just above the horizon hit the box front face at 19 m
    assert depth[h // 2 - 1, w // 2] == pytest.approx(19.0, rel=1e-5)
    assert not out["dynamic"].any()
    assert out["rgb"].dtype == np.uint8 and out["rgb"].shape == (3, h, w, 3)


def test_dynamic_mask_marks_cars_only():
    cars = np.zeros((2, 1, 3))
    cars[:, 0, 1] = [22.0, 25.0]                  # one car driving away on the centreline
    out = render_sequence(_scene([], n_frames=2, cars=cars), height=16, width=24, fov_deg=60.0,
                          **RENDER)
    assert out["dynamic"][0].any()
    # its visible face is the rear (z = centre - 2.1) in camera z
    assert out["depth"][0][out["dynamic"][0]].min() == pytest.approx(22.0 - 2.1 - 10.0, rel=1e-4)
    assert out["depth"][1][out["dynamic"][1]].min() > out["depth"][0][out["dynamic"][0]].min()


def test_static_scene_with_stationary_ego_makes_copy_last_exact():
    from components.fr3d.evaluate import score_split

    rng = np.random.default_rng(0)
    scene = sample_scene(rng, n_frames=8, fps=5.0, speed=0.0, turn_prob=0.5, cars_per_100m=0.0)
    scene["ego_x"][:] = scene["ego_x"][0]         # no wobble: exactly stationary
    scene["ego_z"][:] = scene["ego_z"][0]
    out = render_sequence(scene, height=16, width=24, fov_deg=60.0, **RENDER)
    assert np.array_equal(out["depth"][0], out["depth"][-1])
    frames = {k: v[None] for k, v in out.items()}
    ce, horizons = 3, [1, 3, 4]
    preds = {"context": {"motion": np.broadcast_to(np.eye(4), (1, 3, 4, 4))},
             "copy_last": {"depth": np.broadcast_to(out["depth"][ce], (1, 4, 16, 24)),
                           "motion": np.broadcast_to(np.eye(4), (1, 4, 4, 4))}}
    rows = score_split("test", preds, frames, ce, horizons, context=4, turn_deg=15.0)
    assert len(rows) == len(horizons)
    for row in rows:
        assert row["absrel"] == 0.0 and row["delta1"] == 1.0
        assert row["ate"] == pytest.approx(0.0, abs=1e-9) and row["rpe_r"] == pytest.approx(0.0, abs=1e-6)


def test_depth_metrics_on_a_hand_computed_example():
    gt = np.array([1.0, 2.0, 4.0, 8.0])
    pred = np.array([1.0, 2.0, 2.0, 16.0])
    absrel, d1, n = geo.depth_errors(pred, gt, np.ones(4, bool))
    assert absrel == pytest.approx((0 + 0 + 0.5 + 1.0) / 4) and d1 == pytest.approx(0.5) and n == 4
    scaled = geo.median_scale(2 * gt, gt, np.ones(4, bool))
    assert np.allclose(scaled, gt)


def test_umeyama_recovers_a_known_similarity():
    rng = np.random.default_rng(1)
    src = rng.normal(size=(20, 3))
    angle = 0.7
    rot = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0], [-np.sin(angle), 0, np.cos(angle)]])
    dst = 2.5 * src @ rot.T + np.array([1.0, -2.0, 3.0])
    s, r, t = geo.umeyama(src, dst)
    assert s == pytest.approx(2.5) and np.allclose(r, rot) and np.allclose(t, [1, -2, 3])


def test_trajectory_errors_zero_under_similarity_and_const_velocity_exact_on_straight():
    poses = np.stack([camera_pose(0.0, 2.0 * k, 0.0, 1.5, 0.0) for k in range(10)])
    moved = poses.copy()
    moved[:, :3, 3] = poses[:, :3, 3] * 0.5 + 7.0     # scaled + shifted copy of the truth
    err = geo.trajectory_errors(moved, poses, n_context=4)
    assert err["ate"] == pytest.approx(0.0, abs=1e-9) and err["rpe_t"] == pytest.approx(0.0, abs=1e-9)
    # constant-velocity extrapolation of the last motion is exact on a straight road
    rel = geo.relative_poses(poses)
    future = geo.compose(poses[3], np.repeat(rel[3:4], 6, 0))
    cv = np.concatenate([poses[:4], future])
    assert geo.trajectory_errors(cv, poses, n_context=4)["ate"] == pytest.approx(0.0, abs=1e-9)


def test_rot6d_roundtrip_and_relative_pose_composition():
    r = torch.from_numpy(np.stack([camera_pose(0, 0, a, 1.5, 6.0)[:3, :3] for a in (0.1, -1.0)]))
    assert torch.allclose(geo.rot6d_to_matrix(geo.matrix_to_rot6d(r)), r, atol=1e-10)
    rng = np.random.default_rng(0)
    poses = np.stack([camera_pose(*rng.normal(size=3), 1.5, 6.0) for _ in range(5)])
    rebuilt = geo.compose(poses[0], geo.relative_poses(poses)[1:])
    assert np.allclose(rebuilt, poses[1:])


def _fc(**kw):
    from components.fr3d.config import Fr3dConfig

    return Fr3dConfig.for_profile("smoke", {"forecaster": kw}).forecaster


def test_untrained_forecaster_copies_the_last_frame():
    from components.fr3d.forecaster import build, rollout

    model = build("fr3d", _fc(), 16)
    f, z = torch.randn(2, 4, 6, 16), torch.randn(2, 4, 16)
    fp, zp = rollout(model, f, z, (2, 3), 3)
    assert torch.allclose(fp, f[:, -1:].expand(-1, 3, -1, -1)) and torch.allclose(zp, z[:, -1:].expand(-1, 3, -1))


def test_info_share_is_the_only_path_from_scene_to_pose():
    from components.fr3d.forecaster import build

    torch.manual_seed(0)
    z = torch.randn(2, 4, 16)
    f1, f2 = torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 16)
    for variant, coupled in (("no_share", False), ("fr3d", True)):
        model = build(variant, _fc(), 16)
        for p in model.parameters():          # leave the zero init: outputs must depend on inputs
            torch.nn.init.normal_(p, std=0.1)
        with torch.no_grad():
            za, zb = model(f1, z, (2, 3))[1], model(f2, z, (2, 3))[1]
        assert torch.allclose(za, zb) != coupled, variant
    assert build("scene_only", _fc(), 16).use_pose is False


def test_forecaster_accepts_every_token_grid():
    from components.fr3d.forecaster import build

    model = build("fr3d", _fc(), 16)
    for grid in ((2, 3), (3, 10), (4, 7)):
        n = grid[0] * grid[1]
        fp, zp = model(torch.randn(1, 4, n, 16), torch.randn(1, 4, 16), grid)
        assert fp.shape == (1, n, 16) and zp.shape == (1, 16)


def test_ar_schedule_ramps_to_full_rollout():
    from components.fr3d.forecaster import rollout_length

    fc = _fc(rollout=5, steps=100, ar_ramp=0.6)
    lengths = [rollout_length(s, fc) for s in range(1, 101)]
    assert lengths[0] == 1 and lengths[-1] == 5 and all(a <= b for a, b in zip(lengths, lengths[1:]))
    assert lengths[59] == 5


def test_teacher_heads_and_shapes():
    from components.fr3d.teacher import TinyCUT3R

    torch.manual_seed(0)
    model = TinyCUT3R(dim=32, state_tokens=4, heads=4)
    z, f, enc = model(torch.rand(2, 3, 3, 24, 40))
    assert z.shape == (2, 3, 32) and f.shape == (2, 3, 15, 32) and enc.shape == (2, 3, 15, 32)
    assert model.decode_depth(f, (3, 5)).shape == (2, 3, 24, 40)
    # the untrained pose head predicts no motion
    assert torch.allclose(model.decode_pose(z), torch.eye(4).expand(2, 3, 4, 4), atol=1e-6)


def test_zero_shot_settings_cannot_leak_into_pretraining():
    from components.fr3d.config import Fr3dConfig
    from components.fr3d.teacher import check_no_leak

    sc = Fr3dConfig.for_profile("small").scenes
    check_no_leak([{"height": 32, "width": 48, "fovs": [61.3]}], sc)
    with pytest.raises(ValueError, match="kitti_like"):
        check_no_leak([{"height": 24, "width": 80, "fovs": [61.3]}], sc)
    with pytest.raises(ValueError, match="exact fov"):
        check_no_leak([{"height": 32, "width": 48, "fovs": [70.0]}], sc)
    # the configured pre-training shapes never include B or C
    assert [sc.kitti_like.height, sc.kitti_like.width] not in sc.pretrain_shapes
    assert [sc.nuscenes_like.height, sc.nuscenes_like.width] not in sc.pretrain_shapes


def test_profiles_validate_and_paper_preflight(tmp_path):
    from components.fr3d.config import Fr3dConfig

    for profile in ("smoke", "small", "paper"):
        Fr3dConfig.for_profile(profile)
    Fr3dConfig.for_profile("small").preflight()
    with pytest.raises(FileNotFoundError, match="paper.cut3r_checkpoint"):
        Fr3dConfig.for_profile("paper").preflight()


def test_turning_flag_uses_the_yaw_change_over_the_window():
    from components.fr3d.evaluate import score_split

    n_frames, ce = 8, 3
    poses = np.stack([camera_pose(0.0, float(k), np.radians(8.0) * max(0, k - ce), 1.5, 6.0)
                      for k in range(n_frames)])[None].astype(np.float32)
    frames = {"pose": poses, "depth": np.ones((1, n_frames, 8, 8), np.float32),
              "dynamic": np.zeros((1, n_frames, 8, 8), bool)}
    preds = {"context": {"motion": geo.relative_poses(poses.astype(float))[:, 1:ce + 1]}}
    rows = score_split("test", {**preds, "copy_last": {"depth": np.ones((1, 4, 8, 8))}}, frames, ce,
                       [4], context=4, turn_deg=15.0)
    assert rows[0]["yaw_change"] == pytest.approx(32.0, abs=1e-3) and rows[0]["turning"]


def _fake_scores(copy_last: float, seeds=(0, 1, 2), feat2d_shift: float = 0.0) -> "pd.DataFrame":
    import pandas as pd

    rows = []
    for seed in seeds:
        for split in ("test", "kitti_like", "nuscenes_like"):
            shift = feat2d_shift if split != "test" else 0.0
            for method, absrel, ate in (("fr3d", 0.09, 1.0), ("copy_last", copy_last, 2.0),
                                        ("scene_only", 0.095, np.nan),
                                        ("feat2d", 0.2 + shift, np.nan),
                                        ("feat2d_copy_last", 0.2, np.nan),
                                        ("no_share", 0.11, 1.0 / 0.8)):
                for h in (1, 3, 5, 10):
                    for seq, turning in enumerate((True, False)):
                        rows.append(dict(seed=seed, split=split, method=method, horizon=h,
                                         seq=seq, turning=turning, absrel=absrel, ate=ate))
    return pd.DataFrame(rows)


def test_report_criteria_over_concatenated_seeds():
    import pandas as pd

    from components.fr3d.report import criteria

    scores = pd.concat([_fake_scores(0.10, (s,)) for s in (0, 1, 2)], ignore_index=True)
    probe = pd.DataFrame(dict(seed=[0, 0], method=["fr3d", "fr3d"], horizon=[10, 10], seq=[0, 1],
                              change_static=[0.01, 0.02], change_dynamic=[0.1, 0.1]))
    out = criteria(scores, probe, [1, 3, 5, 10])
    assert out["n_seeds"] == 3 and out["F1_pass"] and out["F5_pass"]
    assert out["F1_worst_ratio"] == pytest.approx(0.9)
    # FR3D 0.9 of its copy-last, the 2D forecaster 1.0 of its own: margin -0.1 everywhere
    assert out["F3_margin_A"] == pytest.approx(-0.1) and out["F3_pass"] and out["F4_pass"]
    assert out["F2_ratio"] == pytest.approx(0.8) and out["F2_pass"]
    # a 3 % gain over copy-last is short of the pre-registered 5 %
    assert criteria(_fake_scores(0.0928), probe, [1, 3, 5, 10])["F1_pass"] is False
    # the 2D forecaster beating its own copy-last by more under shift fails F4 only
    shifted = criteria(_fake_scores(0.10, feat2d_shift=-0.04), probe, [1, 3, 5, 10])
    assert shifted["F3_pass"] and not shifted["F4_pass"]
    assert shifted["F4_margin_BC"] == pytest.approx(0.9 - 0.8)
    assert criteria(scores, probe, [1, 3])["F1_pass"] is None     # horizons not run: not judged


def test_convergence_premise_flags_the_worst_model():
    from components.fr3d.forecaster import convergence
    from components.fr3d.report import convergence_premise

    flat = [{"step": s, "x/val_loss": 1.0} for s in (20, 40, 60, 80)]
    falling = [{"step": s, "x/val_loss": v} for s, v in ((20, 2.0), (40, 1.5), (60, 1.2), (80, 1.0))]
    assert convergence(flat, "x/val_loss", 80)["val_last_quarter_drop"] == 0.0
    assert convergence(falling, "x/val_loss", 80)["val_last_quarter_drop"] == pytest.approx(0.2)
    out = convergence_premise({"a": {"val_last_quarter_drop": 0.01},
                               "b": {"val_last_quarter_drop": 0.2}})
    assert out["P3_worst_model"] == "b" and out["P3_pass"] is False


def test_teacher_trains_on_clips_as_long_as_it_encodes():
    # bug: the teacher was pre-trained on 6-frame clips but encoded 20-frame recurrences
    from components.fr3d.config import Fr3dConfig
    from components.fr3d.teacher import check_clip_length

    for profile in ("smoke", "small"):
        cfg = Fr3dConfig.for_profile(profile)
        check_clip_length(cfg.teacher, cfg.scenes)
    old = Fr3dConfig.for_profile("small", {"teacher": {"clip_frames": 6}})
    with pytest.raises(ValueError, match="clip_frames=6"):
        check_clip_length(old.teacher, old.scenes)


def test_teacher_tokens_see_the_previous_frame():
    # bug: the pose token of a frame could not depend on the camera motion since the previous
    # frame except through the recurrent state; the encoder now sees the frame difference
    from components.fr3d.teacher import TinyCUT3R

    torch.manual_seed(0)
    model = TinyCUT3R(dim=32, state_tokens=4, heads=4)
    frame, prev_a, prev_b = torch.rand(3, 1, 3, 16, 24)
    assert not torch.allclose(model.encode(frame, prev_a), model.encode(frame, prev_b))
    with torch.no_grad():
        za = model(torch.stack([prev_a, frame], 1))[0][:, 1]
        zb = model(torch.stack([prev_b, frame], 1))[0][:, 1]
    assert not torch.allclose(za, zb)


def test_ground_truth_yardsticks_are_exact_where_they_should_be():
    from components.fr3d.evaluate import ground_truth_references, score_split

    n_frames, ce = 8, 3
    # straight road at constant speed: constant velocity is exact
    poses = np.stack([camera_pose(0.0, 1.6 * k, 0.0, 1.5, 6.0) for k in range(n_frames)])[None]
    depth = np.full((1, n_frames, 4, 4), 10.0, np.float32)
    depth[0, ce, 0, 0] = 0.0                               # sky in the last context frame
    frames = {"pose": poses.astype(np.float32), "depth": depth,
              "dynamic": np.zeros((1, n_frames, 4, 4), bool)}
    refs = ground_truth_references(frames, ce, 4, context=4, max_depth=60.0)
    assert refs["gt_copy_last"]["depth"].shape == (1, 4, 4, 4)
    assert refs["gt_copy_last"]["depth"][0, 0, 0, 0] == 60.0
    rows = score_split("val", refs, frames, ce, [4], context=4, turn_deg=15.0)
    pose_row = next(r for r in rows if r["method"] == "gt_const_vel")
    assert pose_row["ate"] == pytest.approx(0.0, abs=1e-6)
    depth_row = next(r for r in rows if r["method"] == "gt_copy_last")
    assert 0 < depth_row["absrel"] < 1


def test_shift_cost_volume_is_zero_at_the_true_image_motion():
    # the teacher's pose pathway reads camera rotation from a cost volume of the frame pair:
    # a frame that is the previous one moved 3 px right (or 1 px down) matches at that shift
    from components.fr3d.teacher import n_shift_costs, shift_costs

    prev = torch.rand(1, 3, 12, 30)
    right = torch.roll(prev, 3, -1)
    costs = shift_costs(right, prev, 4)
    assert costs.shape == (1, n_shift_costs(4), 12, 30)
    inner = costs[0, :, :, 5:25].mean((1, 2))          # away from the replicated border
    assert int(inner[:9].argmin()) == 4 - 3 and inner[4 - 3] == 0
    down = torch.roll(prev, 1, -2)
    inner = shift_costs(down, prev, 4)[0, :, 2:10, :].mean((1, 2))
    assert int(inner.argmin()) == 9 + 1 and inner[9 + 1] == 0   # vertical shifts -2, -1, 1, 2


def test_teacher_checkpoint_keeps_its_architecture(tmp_path):
    # the cost volume, token mixing and depth-head context are constructor args: a saved
    # teacher reloads as built, through the adapter folder and through a pipeline teacher.pt
    # (v6: both go through the adapter's one builder)
    from components.common.io import save_torch
    from components.fr3d.adapter import load_teacher_checkpoint, save_teacher_checkpoint
    from components.fr3d.teacher import TinyCUT3R, load_teacher

    torch.manual_seed(0)
    args = dict(dim=16, state_tokens=4, heads=2, mix_layers=2, max_shift=4, depth_context=1)
    model = TinyCUT3R(**args).eval()
    save_teacher_checkpoint(model, tmp_path / "t", "tiny_cut3r", **args)
    (tmp_path / "p").mkdir()
    save_torch(tmp_path / "p" / "teacher.pt", {"state_dict": model.state_dict(), **args})
    x = torch.rand(1, 3, 3, 16, 24)
    with torch.no_grad():
        _, f, _ = model(x)
        for loaded in (load_teacher_checkpoint(tmp_path / "t"), load_teacher(tmp_path / "p")):
            assert len(loaded.depth_head.mix) == 1
            assert torch.allclose(model(x)[0], loaded(x)[0])
            assert torch.allclose(model.decode_depth(f, (2, 3)), loaded.decode_depth(f, (2, 3)))


def test_2d_decoder_reads_features_as_normalised_in_training():
    # bug (v1, v2): the 2D baseline's depth decoder was trained on normalised encoder features
    # but evaluated on raw ones (forecast and its copy-last), so its depth came from inputs it
    # never saw in training
    from components.fr3d.evaluate import forecast_all
    from components.fr3d.forecaster import build, normalise, token_stats
    from components.fr3d.teacher import TinyCUT3R, depth_head, unpatchify
    from components.fr3d.config import Fr3dConfig

    torch.manual_seed(0)
    fc = Fr3dConfig.for_profile("smoke").forecaster
    n, t, grid, d = 3, 8, (2, 3), 16
    tokens = {"z": torch.randn(n, t, d), "F": torch.randn(n, t, 6, d),
              "enc": torch.randn(n, t, 6, d) * 5 + 3, "grid": grid}
    stats = token_stats(tokens)
    decoder = depth_head(d)
    model = build("feat2d", fc.model_copy(update={"dim": 16}), d).eval()
    teacher = TinyCUT3R(dim=d, state_tokens=4, heads=2).eval()
    out = forecast_all(teacher, {"feat2d": ("feat2d", model, stats, decoder)}, tokens, ce=5,
                       n_ahead=2, context=4, batch=n)
    with torch.no_grad():
        expected = unpatchify(decoder(normalise(tokens["enc"][:, 5], stats, "enc"), grid),
                              *grid).exp()
        # an untrained forecaster copies the last frame, so its forecast decodes to the same
        np.testing.assert_allclose(out["feat2d_copy_last"]["depth"][:, 0], expected.numpy(), rtol=1e-5)
        np.testing.assert_allclose(out["feat2d"]["depth"][:, 0], expected.numpy(), rtol=1e-5)


def test_depth_head_context_mixes_neighbouring_tokens_only_when_asked():
    # v6: with depth_context > 0 the depth head sees the neighbouring tokens on the grid (3x3);
    # with 0 every token is decoded on its own (v5)
    from components.fr3d.teacher import DepthHead

    torch.manual_seed(0)
    grid, d = (3, 4), 8
    tokens = torch.randn(2, 5, 12, d)
    changed = tokens.clone()
    changed[..., 5, :] += 1.0                          # token (row 1, col 1)
    for context, touched in ((0, {5}), (1, {0, 1, 2, 4, 5, 6, 8, 9, 10})):
        head = DepthHead(d, context).eval()
        with torch.no_grad():
            diff = (head(changed, grid) - head(tokens, grid)).abs().sum((0, 1, 3))
        assert head(tokens, grid).shape == (2, 5, 12, 64)
        assert {i for i in range(12) if diff[i] > 0} == touched


def test_channels_last_encoder_matches_the_plain_convolutions():
    # v6: the encoder runs its convolutions channels-last (speed only): same features
    from components.fr3d.teacher import TinyCUT3R, shift_costs

    torch.manual_seed(0)
    model = TinyCUT3R(dim=16, state_tokens=4, heads=2, max_shift=4).eval()
    rgb, prev = torch.rand(2, 2, 3, 16, 24)
    with torch.no_grad():
        fast = model.encode(rgb, prev)
        x = torch.cat([rgb * 2 - 1, (rgb - prev) * 8.0, _coords(2, 16, 24),
                       shift_costs(rgb, prev, 4) * 4.0], 1).contiguous()
        plain = model.encoder(x).flatten(2).transpose(1, 2)
    torch.testing.assert_close(fast, plain, rtol=1e-4, atol=1e-5)


def _coords(b, h, w):
    ys = (torch.arange(h, dtype=torch.float32) + 0.5 - h / 2) / (w / 2)
    xs = (torch.arange(w, dtype=torch.float32) + 0.5 - w / 2) / (w / 2)
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([xx, yy]).expand(b, 2, h, w)


def test_pretrain_shards_partition_one_scene_set():
    # v6: the teacher's pre-training set renders in shards (one render item each); together
    # they are the one scene set gen_scenes drew, each sequence in exactly one shard
    from components.fr3d.config import Fr3dConfig
    from components.fr3d.data import is_pretrain, pretrain_shard

    sc = Fr3dConfig.for_profile("small").scenes
    shards = [s for s in sc.splits if is_pretrain(s)]
    assert shards == ["pretrain_0", "pretrain_1"]
    assert [pretrain_shard(sc, s) for s in shards] == [(0, 2), (1, 2)]
    idx = list(range(7))
    assert sorted(sum((idx[k::n] for k, n in map(lambda s: pretrain_shard(sc, s), shards)), [])) == idx
    assert not any(is_pretrain(s) for s in ("train", "val", "probe", "kitti_like"))


def test_small_profile_validates_exactly_where_p3_compares():
    # v6: validation only at steps 75 and 100 (P3's last quarter), no longer at 25 and 50
    from components.fr3d.config import Fr3dConfig
    from components.fr3d.forecaster import convergence

    fc = Fr3dConfig.for_profile("small").forecaster
    every = fc.log_every * fc.eval_every_logs
    evals = [s for s in range(1, fc.steps + 1)
             if (s % fc.log_every == 0 or s == fc.steps) and (s % every == 0 or s == fc.steps)]
    assert evals == [75, 100] == [round(0.75 * fc.steps), fc.steps]
    out = convergence([{"step": 75, "v": 2.0}, {"step": 100, "v": 1.0}], "v", fc.steps)
    assert out["val_loss_at_75pct"] == 2.0 and out["val_last_quarter_drop"] == 1.0


def test_frustum_culling_leaves_the_renders_unchanged():
    # v6: boxes outside the view frustum are skipped by the ray tests (speed): same images
    from components.fr3d.config import Fr3dConfig
    from components.fr3d.data import make_split
    from components.fr3d.scenes import render_sequence

    sc = Fr3dConfig.for_profile("small").scenes
    recs = make_split(sc, "pretrain_0", np.random.default_rng([7, 6]))[:3]
    recs += make_split(sc, "kitti_like", np.random.default_rng([7, 3]))[:2]
    for r in recs:
        kw = dict(height=r["height"] // 2, width=r["width"] // 2, fov_deg=r["fov_deg"],
                  palette=r["palette"], cam_height=sc.cam_height, cam_pitch_deg=sc.cam_pitch_deg,
                  max_depth=sc.max_depth)
        fast, full = render_sequence(r["scene"], **kw), render_sequence(r["scene"], cull=False, **kw)
        for k in full:
            np.testing.assert_array_equal(fast[k], full[k])
