"""LPIPS-VGG and DISTS rebuilt on the plain-torch VGG-16 (paper profile): the trunk against a
hand-written conv chain in torchvision's index layout, and both metrics against a numpy
computation of their published formulas, all with random weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from components.re2ic.features import VGG16_CHANNELS, VGG16_CONV_INDICES, VGG16Trunk
from components.re2ic.perceptual import (DISTS_CHANNELS, LPIPS_CHANNELS, DISTSVGG, LPIPSVGG,
                                         load_metric)


def random_vgg16_state(seed: int = 0, prefix: str = "features.") -> dict:
    """torchvision's vgg16 key names, He-initialised random weights, small random biases."""
    gen = torch.Generator().manual_seed(seed)
    state, in_ch = {}, 3
    for index, out_ch in zip(VGG16_CONV_INDICES, VGG16_CHANNELS):
        state[f"{prefix}{index}.weight"] = torch.randn(out_ch, in_ch, 3, 3, generator=gen) * (2 / (9 * in_ch)) ** 0.5
        state[f"{prefix}{index}.bias"] = 0.01 * torch.randn(out_ch, generator=gen)
        in_ch = out_ch
    return state


def random_lpips_state(seed: int = 1) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {f"lin{k}.model.1.weight": torch.rand(1, c, 1, 1, generator=gen) for k, c in enumerate(LPIPS_CHANNELS)}


def random_dists_state(seed: int = 2) -> dict:
    gen = torch.Generator().manual_seed(seed)
    n = sum(DISTS_CHANNELS)
    return {"alpha": 0.1 + 0.01 * torch.randn(1, n, 1, 1, generator=gen),
            "beta": 0.1 + 0.01 * torch.randn(1, n, 1, 1, generator=gen)}


@pytest.fixture(scope="module")
def vgg():
    return random_vgg16_state()


def _hand_trunk(state, x, pool):
    """torchvision's vgg16.features, module by module: conv (index i), ReLU (i+1), pool."""
    taps, h = [], x
    pools_after = {3: 4, 8: 9, 15: 16, 22: 23}            # relu index -> pool index
    for index in VGG16_CONV_INDICES:
        h = F.relu(F.conv2d(h, state[f"features.{index}.weight"], state[f"features.{index}.bias"], padding=1))
        if index + 1 in pools_after or index == 28:
            taps.append(h)
            if index + 1 in pools_after:
                h = pool(h)
    return taps


def test_trunk_matches_torchvision_layout_by_hand(vgg):
    x = torch.rand(1, 3, 32, 32)
    taps = VGG16Trunk(vgg, n_convs=13)(x)
    ref = _hand_trunk(vgg, x, lambda h: F.max_pool2d(h, 2))
    assert [t.shape[1] for t in taps] == list(LPIPS_CHANNELS)
    for a, b in zip(taps, ref):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def _np(t):
    return t.detach().double().numpy()


def test_lpips_equals_hand_computed_formula(vgg):
    lin = random_lpips_state()
    metric = LPIPSVGG(vgg, lin)
    gen = torch.Generator().manual_seed(3)
    x, y = torch.rand(2, 3, 32, 32, generator=gen), torch.rand(2, 3, 32, 32, generator=gen)
    shift = np.array([-.030, -.088, -.188])[None, :, None, None]
    scale = np.array([.458, .448, .450])[None, :, None, None]
    scaled = [torch.from_numpy(((2 * _np(v) - 1) - shift) / scale).float() for v in (x, y)]
    fx, fy = (_hand_trunk(vgg, s, lambda h: F.max_pool2d(h, 2)) for s in scaled)
    expected = np.zeros(2)
    for k, (a, b) in enumerate(zip(fx, fy)):
        a, b = _np(a), _np(b)
        na = a / (np.sqrt((a ** 2).sum(1, keepdims=True) + 1e-10) + 1e-10)   # unit vector per pixel
        nb = b / (np.sqrt((b ** 2).sum(1, keepdims=True) + 1e-10) + 1e-10)
        w = _np(lin[f"lin{k}.model.1.weight"])[0, :, 0, 0]
        per_pixel = np.einsum("c,bchw->bhw", w, (na - nb) ** 2)            # 1x1 lin layer
        expected += per_pixel.mean((1, 2))                                  # spatial mean, sum of layers
    got = metric(x, y)
    assert got.shape == (2,)
    assert np.allclose(_np(got), expected, rtol=1e-4)
    assert float(metric(x, x).abs().max()) == 0.0


def test_lpips_key_map_and_bad_file(vgg, tmp_path):
    lin = random_lpips_state()
    torch.save(vgg, tmp_path / "vgg16.pth")
    torch.save(lin, tmp_path / "vgg.pth")
    loaded = load_metric("lpips", str(tmp_path / "vgg16.pth"), str(tmp_path / "vgg.pth"))
    x, y = torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16)
    no_dropout = {k.replace("model.1", "model.0"): v for k, v in lin.items()}
    assert torch.equal(loaded(x, y), LPIPSVGG(vgg, no_dropout)(x, y))
    del lin["lin3.model.1.weight"]
    with pytest.raises(ValueError, match="lin3.model.1.weight"):
        LPIPSVGG(vgg, lin)


def test_l2_pool_and_dists_equal_hand_computed_formula(vgg):
    weights = random_dists_state()
    metric = DISTSVGG(vgg, weights)
    gen = torch.Generator().manual_seed(4)
    x, y = torch.rand(2, 3, 32, 32, generator=gen), torch.rand(2, 3, 32, 32, generator=gen)
    a = np.hanning(5)[1:-1]
    g = np.outer(a, a) / np.outer(a, a).sum()                               # [.25 .5 .25] outer itself

    def l2pool(h):
        hp = np.pad(_np(h) ** 2, ((0, 0), (0, 0), (1, 1), (1, 1)))
        n, c, hh, ww = h.shape
        out = np.zeros((n, c, (hh + 1) // 2, (ww + 1) // 2))
        for i in range(out.shape[2]):
            for j in range(out.shape[3]):
                out[:, :, i, j] = (hp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * g).sum((2, 3))
        return torch.from_numpy(np.sqrt(out + 1e-12)).float()

    mean = np.array([0.485, 0.456, 0.406])[None, :, None, None]
    std = np.array([0.229, 0.224, 0.225])[None, :, None, None]
    feats = [[_np(v)] + [_np(t) for t in _hand_trunk(
        vgg, torch.from_numpy((_np(v) - mean) / std).float(), l2pool)] for v in (x, y)]
    alpha, beta = _np(weights["alpha"])[0, :, 0, 0], _np(weights["beta"])[0, :, 0, 0]
    total = alpha.sum() + beta.sum()
    bounds = np.cumsum((0,) + DISTS_CHANNELS)
    score = np.zeros(2)
    for k, (fa, fb) in enumerate(zip(*feats)):
        al, be = alpha[bounds[k]:bounds[k + 1]] / total, beta[bounds[k]:bounds[k + 1]] / total
        ma, mb = fa.mean((2, 3)), fb.mean((2, 3))
        va, vb = fa.var((2, 3)), fb.var((2, 3))
        cov = (fa * fb).mean((2, 3)) - ma * mb
        score += ((2 * ma * mb + 1e-6) / (ma ** 2 + mb ** 2 + 1e-6)) @ al
        score += ((2 * cov + 1e-6) / (va + vb + 1e-6)) @ be
    got = metric(x, y)
    assert got.shape == (2,)
    assert np.allclose(_np(got), 1 - score, rtol=1e-4, atol=1e-6)
    assert abs(float(metric(x, x).max())) < 1e-5
    with pytest.raises(ValueError, match="beta"):
        DISTSVGG(vgg, {"alpha": weights["alpha"]})
