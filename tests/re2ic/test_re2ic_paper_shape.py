"""re2ic's paper profile end to end (DVC + Prefect + MLflow) on generated PNGs in the Kodak
layout and a randomly initialised VGG-16 saved with torchvision's keys; steps shrunk by --set."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from components.common.preflight import PreflightError
from components.re2ic.config import Re2icConfig
from components.re2ic.features import VGG_CONV_INDICES, VGG16Features
from tests.paper.harness import run_paper_shape

CHANNELS = (64, 64, 128, 128, 256, 256, 256)


def write_random_vgg16(path, seed: int = 0):
    """A state dict with torchvision's vgg16 key names (features.<i>.weight / .bias)."""
    gen = torch.Generator().manual_seed(seed)
    state, in_ch = {}, 3
    for index, out_ch in zip(VGG_CONV_INDICES, CHANNELS):
        state[f"features.{index}.weight"] = torch.randn(out_ch, in_ch, 3, 3, generator=gen) * (2 / (9 * in_ch)) ** 0.5
        state[f"features.{index}.bias"] = torch.zeros(out_ch)
        in_ch = out_ch
    state["classifier.0.weight"] = torch.zeros(4, 4)       # ignored, as in the real file
    torch.save(state, path)
    return path


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


def test_paper_preflight_names_the_missing_key():
    with pytest.raises(PreflightError, match="images.root"):
        Re2icConfig.for_profile("paper").preflight()


@pytest.mark.paper_shape
@pytest.mark.slow  # CI time (~40 s); `make test-all` runs it
def test_re2ic_paper_profile_on_kodak_layout_and_random_vgg(tmp_path):
    root = write_kodak_like(tmp_path / "kodak")
    vgg = write_random_vgg16(tmp_path / "vgg16.pth")
    sets = [f"images.root={root}", "images.validation_files=[kodim03.png]", f"distortion.vgg_weights={vgg}",
            "seeds=[0]", "distortion.num_levels=2", "codec.device=cpu", "codec.iterations=8",
            "codec.log_every=4", "codec.latent_levels=3", "codec.losses=[wawd,mse]",
            "codec.lambdas.mse=[10,40]", "codec.lambdas.wawd=[3,10]", "metric_eval.texture_crop=32"]
    result = run_paper_shape("re2ic", tmp_path / "project", sets)
    images = result.metrics("re2ic", "load_images")
    assert images["n_images"] == 3 and images["n_validation"] == 1
    decode = result.metrics("re2ic", "decode")
    assert decode["n_decoded"] == 2 * 3 * 2 and decode["all_bit_exact"] == 1.0
    metrics = result.metrics("re2ic", "evaluate")
    for key in ("val_wawd_objective_ratio", "val_max_hf_ratio_mse", "a_wawd_hf_ratio",
                "a_wawd_texture_reduction", "mean_wawd_wawd", "max_fit_tail_change"):
        assert math.isfinite(metrics[key]), key
    assert "bd_rate_wawd_vs_mse_psnr" in metrics and metrics["macs_per_pixel"] < 3000
