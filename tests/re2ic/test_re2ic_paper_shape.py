"""re2ic's paper profile end to end (DVC + Prefect + MLflow) on generated PNGs in the Kodak
layout and a randomly initialised VGG-16 saved with torchvision's keys; steps shrunk by --set."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from components.common.preflight import PreflightError
from components.re2ic.config import Re2icConfig
from components.re2ic.features import VGG16Features
from tests.re2ic.test_re2ic_perceptual import random_dists_state, random_lpips_state, random_vgg16_state
from tests.paper.harness import run_paper_shape


def write_random_vgg16(path, seed: int = 0):
    """A state dict with torchvision's vgg16 key names (features.<i>.weight / .bias, all 13
    convolutions: LPIPS and DISTS read up to relu5_3)."""
    state = random_vgg16_state(seed)
    state["classifier.0.weight"] = torch.zeros(4, 4)       # ignored, as in the real file
    torch.save(state, path)
    return path


def write_quality_weights(folder):
    """Random calibration weights in the lpips (weights/v0.1/vgg.pth) and DISTS_pytorch
    (weights.pt) file formats."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(random_lpips_state(), folder / "vgg.pth")
    torch.save(random_dists_state(), folder / "weights.pt")
    return folder / "vgg.pth", folder / "weights.pt"


def write_kodak_like(root, n: int = 3, shape=(48, 64), seed: int = 0):
    """kodim01.png ... : smooth gradients plus texture, 8-bit RGB."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:shape[0], :shape[1]] / max(shape)
    for i in range(1, n + 1):
        base = np.stack([np.sin(3 * xx + i), np.cos(4 * yy - i), xx * yy], -1)
        img = 0.5 + 0.3 * base + 0.1 * rng.normal(size=base.shape)
        Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8)).save(root / f"kodim{i:02d}.png")
    return root


def test_vgg16_key_map_taps_and_bad_file(tmp_path):
    path = write_random_vgg16(tmp_path / "vgg16.pth")
    feats = VGG16Features.from_file(str(path))
    taps = feats(torch.rand(1, 3, 32, 48))
    assert [tuple(t.shape[1:]) for t in taps] == [(3, 32, 48), (64, 32, 48), (128, 16, 24), (256, 8, 12)]
    state = torch.load(path, weights_only=True)
    without_prefix = {k.removeprefix("features."): v for k, v in state.items() if k.startswith("features.")}
    assert torch.equal(VGG16Features(without_prefix)(torch.ones(1, 3, 8, 8))[3], feats(torch.ones(1, 3, 8, 8))[3])
    del state["features.12.weight"]
    with pytest.raises(ValueError, match="features.12.weight"):
        VGG16Features(state)


def test_paper_preflight_names_the_missing_key(tmp_path):
    with pytest.raises(PreflightError, match="images.root"):
        Re2icConfig.for_profile("paper").preflight()
    root = write_kodak_like(tmp_path / "kodak")
    vgg = tmp_path / "vgg16.pth"
    torch.save({}, vgg)                                   # preflight only checks it is a file
    lpips, dists = write_quality_weights(tmp_path / "q")
    base = {"images": {"root": str(root), "validation_files": ["kodim03.png"]},
            "distortion": {"vgg_weights": str(vgg)}}

    def cfg(**quality):
        return Re2icConfig.for_profile("paper", overrides={**base, "quality": quality})

    with pytest.raises(PreflightError, match="^quality.lpips_weights = '' is not set"):
        cfg().preflight()
    with pytest.raises(PreflightError, match="quality.dists_weights .* has no tensor alpha"):
        cfg(lpips_weights=str(lpips), dists_weights=str(lpips)).preflight()
    bad = tmp_path / "bad.pth"
    torch.save({"lin0.model.1.weight": torch.zeros(1, 64, 1, 1)}, bad)
    with pytest.raises(PreflightError, match="quality.lpips_weights .* has no tensor lin1.model.1.weight"):
        cfg(lpips_weights=str(bad), dists_weights=str(dists)).preflight()
    cfg(lpips_weights=str(lpips), dists_weights=str(dists)).preflight()


@pytest.mark.paper_shape
@pytest.mark.slow  # CI time (~40 s); `make test-all` runs it
def test_re2ic_paper_profile_on_kodak_layout_and_random_vgg(tmp_path):
    root = write_kodak_like(tmp_path / "kodak")
    vgg = write_random_vgg16(tmp_path / "vgg16.pth")
    lpips, dists = write_quality_weights(tmp_path / "quality")
    sets = [f"images.root={root}", "images.validation_files=[kodim03.png]", f"distortion.vgg_weights={vgg}",
            f"quality.lpips_weights={lpips}", f"quality.dists_weights={dists}",
            "seeds=[0]", "distortion.num_levels=2", "codec.device=cpu", "codec.iterations=8",
            "codec.log_every=4", "codec.latent_levels=3", "codec.losses=[wawd,mse]",
            "codec.lambdas.mse=[10,40]", "codec.lambdas.wawd=[3,10]", "metric_eval.texture_crop=32",
            "quality.patch=16"]
    result = run_paper_shape("re2ic", tmp_path / "project", sets)
    images = result.metrics("re2ic", "load_images")
    assert images["n_images"] == 3 and images["n_validation"] == 1
    for item in ("wawd-0", "mse-0"):                      # 3 images x 2 lambdas per item
        decode = result.metrics("re2ic", "decode", item)
        assert decode["n_decoded"] == 3 * 2 and decode["all_bit_exact"] == 1.0
    metrics = result.metrics("re2ic", "evaluate")
    for key in ("val_wawd_objective_ratio", "val_max_hf_ratio_mse", "a_wawd_hf_ratio",
                "a_wawd_texture_reduction", "mean_wawd_wawd", "max_fit_tail_change"):
        assert math.isfinite(metrics[key]), key
    assert "bd_rate_wawd_vs_mse_psnr" in metrics and metrics["macs_per_pixel"] < 3000
    # LPIPS / DISTS of every decoded image, and BD-rates with them as quality (per image and
    # on the mean RD curves over the test images)
    for loss in ("mse", "wawd"):
        assert 0 <= metrics[f"mean_lpips_{loss}"] and math.isfinite(metrics[f"mean_dists_{loss}"])
    for key in ("bd_rate_wawd_vs_mse_lpips", "bd_rate_wawd_vs_mse_dists", "bd_rate_mean_wawd_vs_mse_lpips"):
        assert key in metrics, key
    # FID / KID on 16x16 patches (VGG-16 features), one point per (loss, lambda)
    for loss in ("mse", "wawd"):
        assert metrics[f"mean_fid_vgg_{loss}"] >= -1e-6 and math.isfinite(metrics[f"mean_kid_vgg_{loss}"])
    out = result.out("re2ic", "evaluate")
    curves = json.loads((out / "claims.json").read_text())["set_quality_curves"]
    assert [len(curves[loss]) for loss in ("mse", "wawd")] == [2, 2]
    assert all(p["n_patches"] == 2 * 18 for p in curves["mse"])     # 2 test images of 48x64
    assert (out / "rd_mean_curves.png").stat().st_size > 1000
