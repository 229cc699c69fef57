"""Unit tests of the re2ic pipeline pieces: crops, the fast WD-to-target, region modulation,
and the premise / matched-rate bookkeeping of the evaluation."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from components.re2ic.codec import Re2ICCodec, _tail_change, crops_to_fit, laplace_bits
from components.re2ic.evaluate import _gray, compare_at_matched_rate, premise_checks
from components.re2ic.images import crop_id, load_crop
from components.re2ic.wd import (SQRT_GRAD_LIMIT, RandomFeatures, WDToTarget, _HaarStack, _SafeSqrt, _WDTerm,
                                 haar_dwt, level_weights, lowpass, multi_wd, multiscale_stats, wavelet_wd)

BANDS = {"LL": 1.0, "LH": 0.5, "HL": 2.0, "HH": 1.5}


def test_bundled_crop_at_size_512_loads():
    """Regression: the default spec astronaut:40:180 at size 512 (the whole 512^2 photo)
    used to raise in load_crop because the origin pushed the crop off the photo."""
    crop = load_crop("astronaut", 40, 180, 512)
    assert crop.shape == (512, 512, 3) and crop.dtype == np.float32
    assert np.array_equal(crop, load_crop("astronaut", 0, 0, 512))


def test_crop_origin_kept_when_it_fits_and_too_large_size_is_a_clear_error():
    small = load_crop("astronaut", 40, 180, 64)
    assert np.array_equal(small, load_crop("astronaut", 0, 0, 512)[40:104, 180:244])
    with pytest.raises(ValueError, match="images.size must be <= 427"):
        load_crop("china", 0, 0, 512)
    assert crop_id("china:200:300") == "china_200_300"


@pytest.mark.parametrize("bands", [None, BANDS])
def test_wd_to_target_equals_the_plain_functions(bands):
    torch.manual_seed(0)
    feats = RandomFeatures(7, 4)
    a, b = torch.rand(1, 3, 32, 32), torch.rand(1, 3, 32, 32)
    sigma = torch.rand(1, 1, 32, 32) * 3
    fa, fb = feats(a), feats(b)
    fast = WDToTarget(fb, sigma, 3, bands)(fa)
    plain = multi_wd(fa, fb, sigma, 3) if bands is None else wavelet_wd(fa, fb, sigma, bands, 3)
    assert float(fast) == pytest.approx(float(plain), rel=1e-6)
    x = a.clone().requires_grad_(True)
    WDToTarget(fb, sigma, 3, bands)(feats(x)).backward()
    y = a.clone().requires_grad_(True)
    (multi_wd(feats(y), fb, sigma, 3) if bands is None else wavelet_wd(feats(y), fb, sigma, bands, 3)).backward()
    assert torch.allclose(x.grad, y.grad, rtol=1e-5, atol=1e-9)


def test_region_modulation_uses_each_pixels_own_region_parameters():
    torch.manual_seed(1)
    model = Re2ICCodec(8, 8, levels=2, hidden=3, noise_channels=1)
    with torch.no_grad():
        model.region_film.normal_()
        for y in model.latents:
            y.normal_()
    regions = torch.zeros(1, 1, 8, 8, dtype=torch.long)
    regions[..., :, 4:] = 1
    noise = torch.randn(1, 1, 8, 8)
    out = model.synthesize(list(model.latents), regions, noise)
    ups = [model.latents[0], F.interpolate(model.latents[1], size=(8, 8), mode="bilinear",
                                           align_corners=False)]
    h = model.synth_in(torch.cat(ups + [noise], 1))
    film = model.region_film[regions[0, 0]]              # the direct per-pixel lookup
    h = F.relu(h * (1 + film[..., 0, :].permute(2, 0, 1)) + film[..., 1, :].permute(2, 0, 1))
    ref = model.synth_out(h)
    assert torch.allclose(out, ref + model.refine(ref), atol=1e-6)


def _rows(bpps, **metric):
    return [{"bpp": b, **{k: v[i] for k, v in metric.items()}} for i, b in enumerate(bpps)]


def test_premise_compares_own_objective_at_the_common_rate():
    by_curve = {("v", 0, "mse"): _rows([0.1, 0.3], wd=[0.4, 0.2], wawd=[0.4, 0.2], hf_ratio=[0.2, 0.5]),
                ("v", 0, "wd"): _rows([0.1, 0.3], wd=[0.2, 0.1], wawd=[0.5, 0.3], hf_ratio=[0.8, 0.9]),
                ("v", 0, "wawd"): _rows([0.2, 0.6], wd=[0.2, 0.1], wawd=[0.5, 0.3], hf_ratio=[0.8, 0.9])}
    p = premise_checks(by_curve, [("v", 0)], ["mse", "wd", "wawd"])
    assert p["val_wd_objective_ratio"] == pytest.approx(0.5)        # 0.2/0.4 and 0.1/0.2
    assert p["val_wd_rates_matched"] == 1.0
    # wawd's curve overlaps mse on [0.2, 0.3]: common rate sqrt(0.06); wawd is worse there
    assert p["val_wawd_objective_ratio"] > 1
    assert p["val_max_hf_ratio_mse"] == 0.5
    per = compare_at_matched_rate(by_curve, [("v", 0)], "wawd", "mse", ("wawd",))
    assert per[0]["bpp"] == pytest.approx(np.sqrt(0.2 * 0.3))


def test_tail_change():
    assert _tail_change([4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]) == 0.0
    assert _tail_change([10.0, 8.0, 6.0, 4.0, 2.0]) == pytest.approx(1.0)
    # a fit that logged one point used to raise IndexError; it now counts as unconverged
    assert _tail_change([3.0]) == float("inf")
    assert _tail_change([3.0, 3.0]) == 0.0


def test_one_pass_rate_equals_the_per_level_sum():
    torch.manual_seed(4)
    model = Re2ICCodec(16, 16, levels=3, hidden=4, noise_channels=1)
    with torch.no_grad():
        model.log_scales.copy_(torch.tensor([-4.0, 0.3, 1.2]))   # the first is clamped at 0.05
        for y in model.latents:
            y.copy_(torch.randn_like(y) * 2)
    with torch.no_grad():
        per_level = sum(laplace_bits(y, torch.exp(b).clamp(min=0.05)).sum()
                        for y, b in zip(model.latents, model.log_scales))
        assert float(model.rate_bits(list(model.latents))) == pytest.approx(float(per_level), rel=1e-6)


def test_safe_sqrt_passes_the_clamp_and_caps_the_gradient():
    """The fused sqrt(max(x, 0)) has the gradient of the former clamp-with-passthrough + sqrt:
    0.5/sqrt(x) where x > 0, the cap (not 0) where x <= 0."""
    x = torch.tensor([-0.5, 0.0, 1e-16, 0.25, 4.0], dtype=torch.float64, requires_grad=True)
    y = _SafeSqrt.apply(x)
    y.sum().backward()
    assert torch.equal(y.detach(), torch.tensor([0.0, 0.0, 1e-8, 0.5, 2.0], dtype=torch.float64))
    assert torch.allclose(x.grad, torch.tensor([SQRT_GRAD_LIMIT, SQRT_GRAD_LIMIT, SQRT_GRAD_LIMIT, 1.0, 0.25],
                                               dtype=torch.float64))


def test_hand_written_backward_passes_match_finite_differences():
    """_WDTerm (WD to a fixed target), _HaarStack and the stride-1 low-pass: gradcheck in
    float64 (their backward passes are written by hand, not derived by autograd)."""
    torch.manual_seed(6)
    fa = torch.rand(1, 2, 12, 10, dtype=torch.float64, requires_grad=True)
    fb = torch.rand(1, 2, 12, 10, dtype=torch.float64)
    sigma = torch.rand(1, 1, 12, 10, dtype=torch.float64) * 3
    means_b, stds_b = multiscale_stats(fb, 3)
    weights = [w * torch.rand(1, 2, 1, 1, dtype=torch.float64) for w in level_weights(sigma, 3)]
    assert torch.autograd.gradcheck(lambda x: _WDTerm.apply(x, fb, means_b, stds_b, weights), (fa,))
    assert torch.autograd.gradcheck(lambda x: _HaarStack.apply(x, ("HH", "LL", "HL")), (fa,))
    assert torch.autograd.gradcheck(lambda x: lowpass(x, 1), (fa,))
    bands = haar_dwt(fa)
    assert torch.allclose(_HaarStack.apply(fa, ("LH", "LL")), torch.cat([bands["LH"], bands["LL"]], 1))


def test_validation_crops_are_fitted_on_the_first_seeds_only():
    names, validation = ["a", "b", "val"], ["val"]
    assert crops_to_fit(names, validation, 3, [3, 4, 5], 1) == ["a", "b", "val"]
    assert crops_to_fit(names, validation, 4, [3, 4, 5], 1) == ["a", "b"]
    assert crops_to_fit(names, validation, 4, [3, 4, 5], 2) == ["a", "b", "val"]
    assert crops_to_fit(names, validation, 5, [3, 4, 5], 0) == ["a", "b", "val"]   # 0 = every seed


def test_gray_is_elementwise_and_layout_independent():
    # the luma used by the realism statistics must not depend on a BLAS kernel: a
    # non-contiguous view and a contiguous copy give the same bits, and a pixel's value is
    # the float32 weighted sum of its own channels
    rgb = np.random.default_rng(0).random((33, 17, 3), dtype=np.float32)
    view = np.asfortranarray(rgb)[::2]
    assert np.array_equal(_gray(view), _gray(np.ascontiguousarray(rgb[::2])))
    r, g, b = rgb[5, 7]
    assert _gray(rgb)[5, 7] == np.float32(0.299) * r + np.float32(0.587) * g + np.float32(0.114) * b
