"""Corruptions change images as specified; augmentations, the stock source and splits behave."""
import math

import numpy as np
import pytest
import torch

from components.selfsoup.config import Augment
from components.selfsoup.data import (ELASTIC_SMOOTHING, SEVERITY, SOURCE_PHOTOS, augment, corrupt, elastic,
                                      load_digits_images, natural_crops, smooth_field, split_indices)

GREY = np.full((64, 1, 16, 16), 0.5, dtype=np.float32)


def _img(seed=0):
    return np.random.default_rng(seed).uniform(0.2, 0.8, size=(32, 1, 16, 16)).astype(np.float32)


def test_gaussian_noise_has_the_specified_std():
    out = corrupt(GREY, "gaussian_noise", 1, np.random.default_rng(0))
    assert abs((out - GREY).std() - SEVERITY["gaussian_noise"][0]) < 0.005


def test_contrast_scales_deviation_from_the_mean():
    x = _img()
    out = corrupt(x, "contrast", 2, np.random.default_rng(0))
    mean = x.mean(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(out - mean, (x - mean) * SEVERITY["contrast"][1], atol=1e-6)


def test_brightness_adds_and_clips():
    out = corrupt(_img(), "brightness", 5, np.random.default_rng(0))
    np.testing.assert_allclose(out, np.clip(_img() + 0.5, 0, 1), atol=1e-6)


def test_impulse_noise_hits_the_specified_fraction():
    out = corrupt(GREY, "impulse_noise", 4, np.random.default_rng(0))
    assert abs((out != GREY).mean() - SEVERITY["impulse_noise"][3]) < 0.01
    assert set(np.unique(out[out != GREY])) <= {0.0, 1.0}


def test_pixelate_gives_constant_blocks():
    out = corrupt(_img(), "pixelate", 2, np.random.default_rng(0))  # 16 -> 8 -> 16: 2x2 blocks
    blocks = out.reshape(32, 1, 8, 2, 8, 2)
    assert np.allclose(blocks, blocks[:, :, :, :1, :, :1])


def test_blur_keeps_mean_and_lowers_variance():
    x = _img()
    out = corrupt(x, "gaussian_blur", 5, np.random.default_rng(0))
    assert abs(out.mean() - x.mean()) < 0.01 and out.std() < 0.6 * x.std()


@pytest.mark.parametrize("name", list(SEVERITY))
def test_damage_grows_with_severity(name):
    x, _ = load_digits_images(16)
    x = x[:100]
    dist = [np.abs(corrupt(x, name, s, np.random.default_rng(0)) - x).mean() for s in (1, 3, 5)]
    assert dist[0] < dist[1] < dist[2]
    assert all(0 <= corrupt(x, name, 5, np.random.default_rng(0)).min() for _ in [0])


def test_splits_are_disjoint_and_cover_everything():
    idx = split_indices(1797, {"train": 300, "val": 200}, seed=0)
    allidx = np.concatenate(list(idx.values()))
    assert len(idx["test"]) == 1297 and len(np.unique(allidx)) == 1797


def test_augment_keeps_shape_range_and_identity_without_randomness():
    x = torch.rand(8, 1, 16, 16)
    out = augment(x, Augment())
    assert out.shape == x.shape and out.min() >= 0 and out.max() <= 1
    same = augment(x, Augment(crop_scale=(1.0, 1.0), rotation_deg=0.0, noise_std=0.0))
    torch.testing.assert_close(same, x, atol=1e-5, rtol=0)


def test_elastic_is_identity_at_zero_amplitude_and_moves_pixels_otherwise():
    x = _img()
    same = elastic(x, 0.0, ELASTIC_SMOOTHING, np.random.default_rng(0))
    np.testing.assert_allclose(same, x, atol=1e-6)
    out = corrupt(x, "elastic", 3, np.random.default_rng(0))
    assert out.shape == x.shape and 0 <= out.min() and out.max() <= 1
    assert np.abs(out - x).mean() > 0.01


def test_elastic_field_is_smooth_with_the_specified_std():
    field = smooth_field((16, 16), ELASTIC_SMOOTHING, np.random.default_rng(0))
    assert math.isclose(field.std(), 1.0, rel_tol=1e-9)
    neighbours = np.corrcoef(field[:, :-1].ravel(), field[:, 1:].ravel())[0, 1]
    assert neighbours > 0.8          # white noise would give ~0


def test_elastic_shifts_a_constant_gradient_by_the_displacement():
    """On a linear ramp x(r, c) = c, bilinear warping returns c + dx away from the clipped edges."""
    ramp = np.tile(np.arange(16, dtype=np.float32), (16, 1))[None, None] / 16
    out = elastic(ramp, 0.5, ELASTIC_SMOOTHING, np.random.default_rng(1))
    rng = np.random.default_rng(1)
    _dy, dx = (0.5 * smooth_field((16, 16), ELASTIC_SMOOTHING, rng) for _ in range(2))
    inside = (np.arange(16)[None, :] + dx > 0) & (np.arange(16)[None, :] + dx < 15)
    np.testing.assert_allclose(out[0, 0][inside], (ramp[0, 0] + dx / 16)[inside], atol=1e-5)


def test_source_crops_are_natural_images_not_digits():
    crops = natural_crops(24, 16, (16, 64), seed=0)
    digits, _ = load_digits_images(16)
    assert crops.shape == (24, 1, 16, 16) and 0 <= crops.min() and crops.max() <= 1
    assert (crops < 0.05).mean() < 0.3 < (digits < 0.05).mean()   # digits are mostly black background
    np.testing.assert_array_equal(crops, natural_crops(24, 16, (16, 64), seed=0))  # deterministic
    assert "text" not in SOURCE_PHOTOS and "page" not in SOURCE_PHOTOS
