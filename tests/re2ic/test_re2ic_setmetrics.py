"""FID / KID on patches (paper profile): the patch grid, the Fréchet distance against its
closed form, KID against a direct double sum, and the pooled VGG-16 features."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from components.re2ic.setmetrics import PooledVGG, fid, frechet_distance, image_patches, kid, set_quality
from tests.re2ic.test_re2ic_perceptual import random_vgg16_state


def test_patches_are_the_grid_and_the_half_shifted_grid():
    img = np.random.default_rng(0).random((48, 64, 3)).astype(np.float32)
    patches = image_patches([img], 16)
    # 3 x 4 on the grid; shifted by 8: tops 8, 24 and lefts 8, 24, 40
    assert patches.shape == (12 + 6, 16, 16, 3)
    assert np.array_equal(patches[0], img[:16, :16]) and np.array_equal(patches[11], img[32:48, 48:64])
    assert np.array_equal(patches[12], img[8:24, 8:24]) and np.array_equal(patches[-1], img[24:40, 40:56])
    assert len(image_patches([img], 64)) == 0


def test_frechet_distance_of_diagonal_gaussians_is_the_closed_form():
    rng = np.random.default_rng(1)
    mu_a, mu_b = rng.normal(size=5), rng.normal(size=5)
    var_a, var_b = rng.uniform(0.5, 2, 5), rng.uniform(0.5, 2, 5)
    expected = np.sum((mu_a - mu_b) ** 2) + np.sum((np.sqrt(var_a) - np.sqrt(var_b)) ** 2)
    got = frechet_distance(mu_a, np.diag(var_a), mu_b, np.diag(var_b))
    assert got == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("m, n, d", [(40, 30, 6), (9, 7, 12)])   # full-rank and singular covariances
def test_fid_from_samples_equals_the_moment_formula(m, n, d):
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(m, d)), rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 0.3
    expected = frechet_distance(a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False))
    assert fid(a, b) == pytest.approx(expected, rel=1e-6)
    # fewer samples than dimensions (singular covariances): FID(x, x) is still 0
    x = rng.normal(size=(12, 64))
    assert abs(fid(x, x)) < 1e-10 and fid(x, x + 1.0) == pytest.approx(64.0, rel=1e-9)


def test_fid_of_samples_approaches_the_population_value():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(20000, 3))
    b = rng.normal(size=(20000, 3)) * 2 + np.array([1.0, 0, 0])
    # population: |mu|^2 = 1, per dim (1 - 2)^2 = 1 -> 1 + 3
    assert fid(a, b) == pytest.approx(4.0, abs=0.15)
    assert abs(fid(a, a)) < 1e-6


def test_kid_is_the_unbiased_mmd_with_the_cubic_kernel():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(7, 4)), rng.normal(size=(5, 4)) + 0.5

    def k(x, y):
        return (x @ y / 4 + 1) ** 3
    aa = sum(k(a[i], a[j]) for i in range(7) for j in range(7) if i != j) / (7 * 6)
    bb = sum(k(b[i], b[j]) for i in range(5) for j in range(5) if i != j) / (5 * 4)
    ab = sum(k(x, y) for x in a for y in b) / 35
    assert kid(a, b) == pytest.approx(aa + bb - 2 * ab, rel=1e-10)
    # unbiased: ~0 for two samples of one distribution, clearly positive after a shift
    x, y = rng.normal(size=(400, 4)), rng.normal(size=(400, 4))
    assert abs(kid(x, y)) < 0.05 < kid(x, y + 1.0)


def test_set_quality_on_pooled_vgg_features():
    net = PooledVGG(random_vgg16_state(0)).eval()
    assert net(torch.rand(2, 3, 32, 32)).shape == (2, 512)
    rng = np.random.default_rng(4)
    originals = [rng.random((48, 64, 3)).astype(np.float32) for _ in range(2)]
    same = set_quality(net, originals, originals, 16, ["fid_vgg", "kid_vgg"])
    blurred = set_quality(net, originals, [np.full_like(o, o.mean()) for o in originals], 16, ["fid_vgg", "kid_vgg"])
    assert same["n_patches"] == 2 * 18 and abs(same["fid_vgg"]) < 1e-6
    assert blurred["fid_vgg"] > 1e-3 and blurred["kid_vgg"] > abs(same["kid_vgg"])
    with pytest.raises(ValueError, match="quality.patch"):
        set_quality(net, originals, originals, 64, ["fid_vgg"])
