"""The paper profile's fast checks: preflight (one line naming the key), the UNet-as-D(x, σ)
wrappers against hand computations on a real tiny UNet2DModel, the latent decode, the FD from
stored statistics. The end-to-end run is in test_steindiff_paper_shape.py (slow)."""
import json
import math

import numpy as np
import pytest
import torch

from components.common.preflight import PreflightError
from components.steindiff.config import SteindiffConfig
from components.steindiff.pretrained import (UNetDenoiser, check_reference, sigma_to_t,
                                             to_uint8_images, vp_sigmas)
from components.steindiff.quality import feature_stats, frechet_distance, frechet_from_stats


def _fake_model(folder, config: dict, weights: str):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / weights).write_bytes(b"")
    return folder


def _paths(tmp_path, unet_channels=3, scheduler=True, pipeline=True):
    """Folders that pass the preflight's file checks (preflight loads no model)."""
    root = tmp_path / "ddpm"
    unet = root / "unet" if pipeline else root
    _fake_model(unet, {"_class_name": "UNet2DModel", "in_channels": unet_channels},
                "diffusion_pytorch_model.safetensors")
    if pipeline:
        (root / "model_index.json").write_text("{}")
    if scheduler:
        sched = root / "scheduler" if pipeline else root
        sched.mkdir(exist_ok=True)
        (sched / "scheduler_config.json").write_text(json.dumps({"_class_name": "DDPMScheduler"}))
    feat = _fake_model(tmp_path / "dinov2", {"model_type": "dinov2"}, "model.safetensors")
    ref = tmp_path / "ref.npz"
    np.savez(ref, mu=np.zeros(4), sigma=np.eye(4))
    return {"checkpoint": str(root), "feature_model": str(feat), "reference": str(ref)}


def _preflight(paper: dict):
    SteindiffConfig.for_profile("paper", {"paper": paper}).preflight()


def test_paper_preflight_accepts_the_published_layouts(tmp_path):
    _preflight(_paths(tmp_path / "a"))                          # pipeline folder
    _preflight(_paths(tmp_path / "b", pipeline=False))          # flat google/ddpm-* folder
    _preflight({**_paths(tmp_path / "c", scheduler=False), "parameterization": "edm"})
    images = tmp_path / "d" / "ref_images" / "00000"
    images.mkdir(parents=True)
    from PIL import Image
    Image.new("RGB", (8, 8)).save(images / "img0.png")
    _preflight({**_paths(tmp_path / "d"), "reference": str(images.parent)})


@pytest.mark.parametrize("change, key, says", [
    (lambda p, t: {**p, "checkpoint": ""}, "paper.checkpoint", "is not set"),
    (lambda p, t: {**p, "checkpoint": str(t / "nowhere")}, "paper.checkpoint", "is not a folder"),
    (lambda p, t: {**p, "feature_model": str(t)}, "paper.feature_model", "missing config.json"),
    (lambda p, t: {**p, "reference": str(t / "nope.npz")}, "paper.reference", "does not exist"),
    (lambda p, t: {**p, "reference": str(t / "dinov2")}, "paper.reference", "has no images"),
])
def test_paper_preflight_names_the_key_in_one_line(tmp_path, change, key, says):
    paper = change(_paths(tmp_path), tmp_path)
    with pytest.raises(PreflightError) as err:
        _preflight(paper)
    assert err.value.key == key and says in str(err.value) and "\n" not in str(err.value)


def test_paper_preflight_wants_a_scheduler_for_vp_and_an_autoencoder_for_latents(tmp_path):
    with pytest.raises(PreflightError, match="no scheduler config"):
        _preflight(_paths(tmp_path / "a", scheduler=False))
    with pytest.raises(PreflightError, match="paper.vae .*4 input channels"):
        _preflight(_paths(tmp_path / "b", unet_channels=4))
    bad = tmp_path / "c" / "stats.npz"
    bad.parent.mkdir()
    np.savez(bad, mean=np.zeros(3))
    with pytest.raises(PreflightError, match="not mu and sigma"):
        check_reference("paper.reference", str(bad))


def test_repro_run_paper_without_paths_exits_with_one_line():
    from flows.runtime.runner import validate_config
    from flows.steindiff import METHOD

    with pytest.raises(SystemExit) as err:
        validate_config(METHOD, "paper", {})
    message = str(err.value)
    assert "paper.checkpoint" in message and "\n" not in message and "Traceback" not in message


def test_small_profile_never_touches_the_paper_path():
    cfg = SteindiffConfig.for_profile("small")
    assert not cfg.paper.enabled and cfg.paper.checkpoint == ""
    cfg.preflight()


# ----------------------------------------------------------------------------- D(x, σ)
@pytest.fixture(scope="module")
def tiny_unet():
    from components.common.tiny_models import build_tiny

    return build_tiny("unet2d")


def test_sigma_to_t_inverts_the_training_sigmas():
    from diffusers import DDPMScheduler

    log_sigmas = vp_sigmas(DDPMScheduler(num_train_timesteps=1000).alphas_cumprod).log()
    for t in (0, 1, 17, 500, 999):
        assert sigma_to_t(math.exp(float(log_sigmas[t])), log_sigmas) == pytest.approx(t, abs=1e-6)
    mid = math.exp(0.5 * float(log_sigmas[10] + log_sigmas[11]))
    assert sigma_to_t(mid, log_sigmas) == pytest.approx(10.5, abs=1e-6)
    assert sigma_to_t(1e-6, log_sigmas) == 0.0 and sigma_to_t(1e6, log_sigmas) == 999.0


def test_vp_eps_wrapper_is_x_minus_sigma_eps_at_a_training_step(tiny_unet):
    from diffusers import DDPMScheduler

    alphas = DDPMScheduler(num_train_timesteps=1000).alphas_cumprod
    d = UNetDenoiser(tiny_unet, "vp_eps", alphas, "epsilon")
    t = 300
    sigma = float(vp_sigmas(alphas)[t])
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * sigma
    with torch.no_grad():
        eps = tiny_unet(x * alphas[t].sqrt(), torch.full((2,), float(t))).sample
        expected = x - sigma * eps
        got = d(x, sigma)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    v = UNetDenoiser(tiny_unet, "vp_eps", alphas, "v_prediction")
    with torch.no_grad():   # x0 = sqrt(ᾱ) x_VP - sqrt(1 - ᾱ) v, with the UNet's output as v
        a, s = float(alphas[t].sqrt()), float((1 - alphas[t]).sqrt())
        torch.testing.assert_close(v(x, sigma), a * (a * x) - s * eps, rtol=1e-4, atol=1e-4)


def test_edm_wrapper_applies_the_edm_preconditioning(tiny_unet):
    d = UNetDenoiser(tiny_unet, "edm", sigma_data=0.5, time_scale=1000.0)
    sigma, sd = 2.0, 0.5
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)) * sigma
    c_skip, c_out = sd**2 / (sigma**2 + sd**2), sigma * sd / math.sqrt(sigma**2 + sd**2)
    c_in, c_noise = 1 / math.sqrt(sigma**2 + sd**2), math.log(sigma) / 4
    with torch.no_grad():
        f = tiny_unet(c_in * x, torch.full((2,), 1000.0 * c_noise)).sample
        torch.testing.assert_close(d(x, sigma), c_skip * x + c_out * f, rtol=1e-4, atol=1e-4)
    assert d.sample_shape == (3, 16, 16) and d.num_classes == 0


def test_uint8_images_map_the_data_range_and_decode_latents():
    x = torch.tensor([-1.0, 0.0, 1.0, 3.0, float("nan")]).view(1, 1, 1, 5).expand(1, 3, 1, 5)
    out = to_uint8_images(x)
    assert out.shape == (1, 1, 5, 3) and out.dtype == np.uint8
    assert out[0, 0, :, 0].tolist() == [0, 128, 255, 255, 128]
    from components.common.tiny_models import build_tiny

    vae = build_tiny("vae")     # 2 blocks: latents at half the pixel resolution
    latents = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    assert to_uint8_images(latents, vae, latent_scale=0.18215).shape == (2, 16, 16, 3)


def test_fd_from_stats_matches_fd_from_features():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(200, 5)), rng.normal(0.3, 1.2, size=(300, 5))
    assert frechet_from_stats(*feature_stats(a), *feature_stats(b)) == frechet_distance(a, b)
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-8)


def test_latent_checkpoint_samples_through_the_digits_stage(tmp_path):
    """An LDM pipeline folder: preflight finds its vqvae/, the sampling stage (as the runtime
    calls it, declared params only) stores decoded uint8 images with γ logged per batch."""
    from components.common.context import LocalContext
    from components.common.io import read_json, read_table
    from flows.runtime.dag import DeclaredParams
    from flows.steindiff import METHOD
    from tests.steindiff.paper_layouts import write_ldm_pipeline

    paths = _paths(tmp_path)
    paths["checkpoint"] = str(write_ldm_pipeline(tmp_path / "ldm"))
    cfg = SteindiffConfig.for_profile("paper", {
        "paper": {**paths, "n_images": 4, "batch_size": 2, "device": "cpu", "latent_scale": 0.18215},
        "sample": {"solvers": ["heun"], "steps": [2], "corrections": ["none", "stein"]}})
    cfg.preflight()
    stage = METHOD.stage("sample_digits")
    ctx = LocalContext(out_dir=tmp_path / "out", inputs={}, item={"solver": "heun", "seed": 0})
    stage.load()(DeclaredParams(cfg, stage.params, stage.name), ctx)
    images = np.load(tmp_path / "out" / "samples" / "N2_stein.npy")
    assert images.shape == (4, 16, 16, 3) and images.dtype == np.uint8
    assert [r["nfe"] for r in read_json(tmp_path / "out" / "runs.json")] == [3, 3]
    gammas = read_table(tmp_path / "out" / "gammas.parquet").to_pandas()
    assert set(gammas.batch) == {0, 1} and set(gammas.correction) == {"stein"}


def test_image_grid_runs_the_oracle_arm_and_the_multistep_solvers(tmp_path):
    """The oracle arm on images (switched on by sample.oracle.digits_steps) with a multistep
    solver (UniPC; its state threads through the oracle's rescaled steps) through the sampling
    stage of a pixel DDPM pipeline: one oracle γ per corrected step and batch, the last step
    uncorrected, NFE one per step."""
    from components.common.context import LocalContext
    from components.common.io import read_json, read_table
    from flows.runtime.dag import DeclaredParams
    from flows.steindiff import METHOD
    from tests.steindiff.paper_layouts import write_ddpm_pipeline

    paths = _paths(tmp_path)
    paths["checkpoint"] = str(write_ddpm_pipeline(tmp_path / "ddpm"))
    stage = METHOD.stage("sample_digits")
    for solver in ("unipc",):
        cfg = SteindiffConfig.for_profile("paper", {
            "paper": {**paths, "n_images": 2, "batch_size": 1, "device": "cpu"},
            "sample": {"solvers": [solver], "steps": [3], "corrections": ["none", "oracle"],
                       "oracle": {"solvers": [solver], "digits_steps": [3],
                                  "digits_substeps": 2}}})
        out = tmp_path / solver
        ctx = LocalContext(out_dir=out, inputs={}, item={"solver": solver, "seed": 0})
        stage.load()(DeclaredParams(cfg, stage.params, stage.name), ctx)
        runs = read_json(out / "runs.json")
        assert [(r["correction"], r["nfe"]) for r in runs] == [("none", 3), ("oracle", 3)]
        gammas = read_table(out / "gammas.parquet").to_pandas()
        inner = gammas[gammas.sigma_next > 0]
        assert len(inner) == 2 * 2 and inner.gamma_oracle.map(math.isfinite).all()
        assert (gammas[gammas.sigma_next == 0].gamma == 1.0).all()
        assert np.load(out / "samples" / "N3_oracle.npy").shape == (2, 16, 16, 3)
