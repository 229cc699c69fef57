"""persist's paper profile: preflight (fast, one line naming the key), the paper's module sizes,
and the profile end to end on CPU with every size shrunk by --set (paper_shape, slow).

The paper profile keeps the numpy voxel world (Craftium/Luanti is not on the package registries)
and trains every module from scratch, as the paper does; nothing is loaded from a path."""
import json
import math

import pandas as pd
import pytest
import torch
import yaml

from components.common.preflight import PreflightError
from components.persist.config import PersistConfig


def preflight(**sections):
    PersistConfig.for_profile("paper", sections).preflight()


def _one_line(err: PreflightError, key: str, fragment: str) -> None:
    message = str(err)
    assert err.key == key and fragment in message and "\n" not in message and message.startswith(key)


# ----------------------------------------------------------------------------- preflight (fast)
def test_every_profile_passes_preflight_on_a_cpu_machine_the_paper_one_on_request():
    for profile in ("smoke", "small"):
        PersistConfig.for_profile(profile).preflight()
    preflight(device={"device": "cpu"})
    cfg = PersistConfig.for_profile("paper")
    assert cfg.device.device == "auto" and cfg.pixel_model.arch == "dit"
    assert cfg.world.backend == "numpy_voxel"
    small = PersistConfig.for_profile("small")
    assert small.device.device == "cpu" and small.pixel_model.arch == "unet"   # small unchanged


def test_craftium_backend_fails_in_one_line_naming_the_key():
    with pytest.raises(PreflightError) as err:
        preflight(world={"backend": "craftium"})
    _one_line(err.value, "world.backend", "numpy_voxel")


def test_a_stage_called_without_preflight_names_the_backend_key_in_one_line(tmp_path):
    """Regression: gen_worlds raised NotImplementedError (a traceback) for world.backend=craftium."""
    from types import SimpleNamespace

    from components.persist.data import gen_worlds_stage

    cfg = PersistConfig.for_profile("paper", {"world": {"backend": "craftium"}})
    with pytest.raises(PreflightError) as err:
        gen_worlds_stage(cfg, SimpleNamespace(out_dir=tmp_path))
    _one_line(err.value, "world.backend", "Craftium/Luanti")


@pytest.mark.parametrize("sections, key", [
    ({"pixel_model": {"dit": {"patch": 7}}}, "pixel_model.dit.patch"),
    ({"world_model": {"patch": 7}}, "world_model.patch"),
    ({"world": {"crop": 50}}, "world.crop"),
    ({"world": {"crop": 48, "size": 40}}, "world.crop"),
])
def test_shapes_that_do_not_tile_fail_before_anything_runs(sections, key):
    with pytest.raises(PreflightError) as err:
        preflight(device={"device": "cpu"}, **sections)
    _one_line(err.value, key, "set " + key)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_the_paper_profile_without_a_gpu_fails_in_one_line_unless_cpu_is_asked(device):
    with pytest.raises(PreflightError) as err:
        preflight(device={"device": device})
    _one_line(err.value, "device.device", "CUDA")


def test_the_cli_prints_the_preflight_problem_alone():
    from flows.runtime.registry import get as get_method
    from flows.runtime.runner import validate_config

    with pytest.raises(SystemExit) as err:
        validate_config(get_method("persist"), "paper", {"world": {"backend": "craftium"}})
    assert str(err.value).startswith("[repro] persist: world.backend = 'craftium'") and "\n" not in str(err.value)


def test_heavy_stages_ask_for_a_gpu_in_the_paper_profile_only():
    from flows.persist import METHOD

    heavy = {"train_vae3d", "encode_latents", "train_world_model", "train_camera_model",
             "train_pixel_model", "train_baseline", "rollout_eval"}
    for stage in METHOD.stages:
        want = 1.0 if stage.name in heavy else 0.0
        assert stage.resources.gpus("paper") == want, stage.name
        assert stage.resources.gpus("small") == 0 and stage.resources.gpus("smoke") == 0
        assert ("device" in stage.params) == (stage.name in heavy)


def test_paper_world_model_vae_and_camera_have_the_papers_shapes():
    """W on the meta device (no memory): 12^3 latent tokens x 48 channels, ~686M parameters."""
    from components.persist.models import VAE3D, CameraModel, count_params
    from components.persist.train import build_world_model

    cfg = PersistConfig.for_profile("paper")
    w = cfg.world
    grid = (w.crop // w.stride, w.crop // w.stride, w.height // w.stride)
    assert grid == (12, 12, 12) and cfg.vae3d.latent_channels == 48 and w.crop == w.height == 48
    with torch.device("meta"):
        world = build_world_model(cfg.world_model, cfg.vae3d.latent_channels, grid, w.frame)
        vae = VAE3D(cfg.vae3d.latent_channels, cfg.vae3d.width, arch=cfg.vae3d.arch)
        camera = CameraModel(cfg.camera_model.context, 4 * grid[2] * cfg.vae3d.latent_channels,
                             cfg.camera_model.hidden)
    assert abs(count_params(world) / 686e6 - 1) < 0.05
    assert world.pos.shape[1] == 12 ** 3                  # one token per latent cell (3D-XL, patch 1)
    assert 10e6 < count_params(vae) < 138e6 and count_params(camera) < 234e6   # smaller than the paper's


# ----------------------------------------------------------------------------- slow: DiT and paper shape
@pytest.mark.slow
def test_paper_pixel_models_are_diffusers_dits_of_the_papers_size():
    from components.persist.models import count_params
    from components.persist.train import backbone_name, build_pixel_model

    cfg = PersistConfig.for_profile("paper")
    with torch.device("meta"):
        models = {v: build_pixel_model(cfg.pixel_model, v, cfg.world.frame) for v in ("persist", "baseline")}
    for model in models.values():
        assert backbone_name(model) == "DiTTransformer2DModel"
        assert abs(count_params(model) / 460e6 - 1) < 0.05
        assert model.dit.config.sample_size == 360 and model.dit.config.patch_size == 10


@pytest.mark.slow            # importing diffusers alone takes ~4 s here
def test_dit_pixel_model_predicts_a_frame_shaped_velocity():
    from components.persist.models import DiTPixelModel

    torch.manual_seed(0)
    model = DiTPixelModel(cond_channels=5, n_actions_ctx=2, frame=8, layers=1, heads=2, head_dim=8, patch=4)
    v = model(torch.randn(3, 3, 8, 8), torch.rand(3), torch.randn(3, 5, 8, 8), torch.tensor([[0, 1], [2, 3], [4, 5]]))
    assert v.shape == (3, 3, 8, 8) and torch.isfinite(v).all()


def smoke_sizes() -> list[str]:
    """The smoke profile's sizes as --set pairs (on top of the paper profile's structure)."""
    def flat(prefix, value):
        if isinstance(value, dict):
            return [p for k, v in value.items() for p in flat(f"{prefix}.{k}" if prefix else k, v)]
        return [f"{prefix}={json.dumps(value)}"]
    return flat("", PersistConfig.SMOKE)


# the paper's structure kept: DiT pixel models, W with K = 8 past world frames, C with K_C = 8,
# K_P = 16 for P and the baseline, 20 sampler steps of the 3D latent world, no recentring
TINY_PAPER = smoke_sizes() + [
    "device.device=cpu", "pixel_model.dit.layers=1", "pixel_model.dit.heads=2", "pixel_model.dit.head_dim=8",
    "pixel_model.dit.patch=4", "world_model.patch=4", "world_model.n_heads=4", "vae3d.batch_size=16",
    "vae3d.lr=0.002", "world_model.lr=0.001", "camera_model.lr=0.002", "pixel_model.lr=0.001",
    "camera_model.batch_size=64",
]


@pytest.mark.slow
@pytest.mark.paper_shape
def test_persist_paper_profile_end_to_end_on_tiny_configs(tmp_path):
    from components.common.io import read_json, read_table
    from tests.paper.harness import run_paper_shape

    result = run_paper_shape("persist", tmp_path / "project", TINY_PAPER)
    params = yaml.safe_load((result.project.root / "data" / "persist" / "params.yaml").read_text())
    assert params["profile"] == "paper" and params["pixel_model"]["arch"] == "dit"
    assert params["world_model"]["context"] == 8 and params["evaluate"]["rf_steps"] == 2
    for stage in ("train_pixel_model", "train_baseline"):
        info = read_json(result.out("persist", stage, "0") / "info.json")
        assert info["backbone"] == "DiTTransformer2DModel"
        assert math.isfinite(result.metrics("persist", stage, "0")["final_loss"])
    for stage in ("train_world_model", "train_camera_model"):
        assert math.isfinite(result.metrics("persist", stage, "0")["final_loss"])
    ev = {**result.metrics("persist", "rollout_eval", "probe-0"), **result.metrics("persist", "rollout_eval", "rest-0")}
    small_names = {"copy_first_probe_acc_gt_t4", "classifier_ceiling_acc", "ground_truth_probe_probe_score"}
    assert small_names <= set(ev)
    metrics = pd.concat([read_table(result.out("persist", "rollout_eval", f"{p}-0") / "metrics.parquet").to_pandas()
                         for p in ("probe", "rest")])
    assert set(metrics.variant) >= {"persist", "persist_w0", "oracle", "baseline", "copy_first"}
    crit = read_json(result.out("persist", "report") / "criteria.json")
    assert {"P1_oracle_val_probe_score", "P2_val_context_probe_pixels_max", "C1_pass", "C2_pass",
            "C3_pass"} <= set(crit)


def test_eval_world_history_keeps_k_frames_newest_first_and_shifts_their_masks():
    """W with K > 1 past world frames at inference (the paper's K = 8; the eval once passed one
    frame whatever K was): newest first, empty frames invalid, the crop shift moves every
    frame and its mask alike."""
    import numpy as np

    from components.persist.evaluate import shift_history, world_history

    w0, w1 = torch.full((1, 2, 4, 4, 3), 1.0), torch.full((1, 2, 4, 4, 3), 2.0)
    hist = world_history(w0, 3)
    assert len(hist) == 3 and hist[0][1].sum() == 48 and hist[1][1].sum() == 0 and hist[2][0].abs().sum() == 0
    hist = [shift_history(z, v, np.array([[1, 0]])) for z, v in hist]
    assert hist[0][1][0, 0, -1].sum() == 0 and hist[0][1][0, 0, :-1].sum() == 36   # one column entered
    hist = world_history(w1, 3, hist)
    assert [float(z.max()) for z, _ in hist] == [2.0, 1.0, 0.0]
    assert torch.equal(hist[1][0], hist[1][1].expand_as(hist[1][0]))               # w0 is zero where invalid
