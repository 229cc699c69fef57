"""Wasserstein distortion (WD) and its wavelet variant (WA-WD), in torch.

WD compares two feature maps through local statistics (mean and standard deviation) pooled
over a neighbourhood whose size sigma varies per pixel: log2 sigma = 0 is plain feature MSE
(fidelity); large sigma only asks the local feature statistics to match (realism: any
texture with the right statistics is fine). Pooling is a pyramid of [.25,.5,.25] low-passes,
as in the CoDeX reference; each pyramid level is weighted by relu(1 - |log2 sigma - level|).

WA-WD first splits each feature map into orthonormal Haar subbands (LL, LH, HL, HH) and
computes WD per subband with its own weight, so that fine-detail bands and the coarse band
can be traded off separately (our reading of the paper's "subband-aware" WD).

Features: pretrained VGG weights cannot be fetched offline, so the embedded default uses the
pixels plus two layers of a fixed-seed random conv net (random-feature texture statistics).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_LOWPASS_1D = torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64)
SQRT_GRAD_LIMIT = 1e6


def _kernel(channels: int, like: torch.Tensor) -> torch.Tensor:
    k2d = torch.outer(_LOWPASS_1D, _LOWPASS_1D).to(like)
    return k2d.expand(channels, 1, 3, 3)


def _lowpass_same(x: torch.Tensor) -> torch.Tensor:
    """Stride-1 [.25,.5,.25] x [.25,.5,.25] low-pass with zero 'same' padding as sums of
    neighbours ((a + b) + (b + c) = a + 2b + c along each axis, then / 16): six elementwise
    passes, no autograd graph. The operator is self-adjoint (symmetric kernel, zero padding),
    so the backward pass of ``_WDTerm`` applies this same function to the gradient."""
    p = F.pad(x, (1, 1, 1, 1))
    s = p[..., :-1] + p[..., 1:]
    t = s[..., :-1] + s[..., 1:]
    u = t[..., :-1, :] + t[..., 1:, :]
    return (u[..., :-1, :] + u[..., 1:, :]) * 0.0625


def lowpass(x: torch.Tensor, stride: int) -> torch.Tensor:
    """Depthwise 3x3 low-pass with zero 'same' padding (extra pad on the high side when
    decimating, as XLA's SAME does). Stride 1, which dominates the WD cost, is done as sums
    of neighbours with a self-adjoint backward pass (``_lowpass_same``)."""
    if stride == 1:
        return _Lowpass.apply(x)
    pad = _same_pad_stride2(x.shape[-2:])
    return F.conv2d(F.pad(x, pad), _kernel(x.shape[1], x), stride=stride, groups=x.shape[1])


class _Lowpass(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _lowpass_same(x)

    @staticmethod
    def backward(ctx, grad):
        return _lowpass_same(grad)


def _same_pad_stride2(hw) -> tuple[int, int, int, int]:
    pads = []
    for size in (hw[1], hw[0]):
        total = max((math.ceil(size / 2) - 1) * 2 + 3 - size, 0)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


class _SafeSqrt(torch.autograd.Function):
    """sqrt(max(x, 0)) whose gradient passes the clamp unchanged (keeps a useful signal where
    the variance estimate dips below zero) and is capped where the result is ~0. One function
    instead of clamp-with-passthrough + sqrt: the same values and gradients, fewer passes."""

    @staticmethod
    def forward(ctx, x):
        y = torch.sqrt(torch.clamp(x, min=0.0))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * torch.clamp(0.5 / y, max=SQRT_GRAD_LIMIT)


def multiscale_stats(features: torch.Tensor, num_levels: int):
    channels = features.shape[1]
    both = torch.cat([features, features.square()], 1)   # one low-pass for mean and power
    means, stds = [], []
    for _ in range(num_levels):
        pooled = lowpass(both, 1)
        m, p = pooled[:, :channels], pooled[:, channels:]
        means.append(m)
        stds.append(_SafeSqrt.apply(p - m.square()))
        both = pooled[..., ::2, ::2]
    return means, stds


def level_weights(log2_sigma: torch.Tensor, num_levels: int) -> list[torch.Tensor]:
    """relu(1 - |log2 sigma - level|) for level 0..num_levels, the sigma map low-passed and
    decimated alongside the statistics pyramid (level 0 and 1 share the full grid)."""
    weights = []
    for level in range(num_levels + 1):
        weights.append(F.relu(1 - (log2_sigma - level).abs()))
        if level > 0:
            log2_sigma = lowpass(log2_sigma, 2)
    return weights


def _wd_from_stats(fa, stats_a, fb, stats_b, weights) -> torch.Tensor:
    (ma, sa), (mb, sb) = stats_a, stats_b
    maps = [(fa - fb).square()] + [(a - b).square() + (c - d).square()
                                   for a, b, c, d in zip(ma, mb, sa, sb)]
    return sum((w * m).mean() for w, m in zip(weights, maps))


def wasserstein_distortion(fa: torch.Tensor, fb: torch.Tensor, log2_sigma: torch.Tensor,
                           num_levels: int = 4) -> torch.Tensor:
    """fa, fb: (B, C, H, W); log2_sigma: (B, 1, H, W). Returns a scalar."""
    return _wd_from_stats(fa, multiscale_stats(fa, num_levels), fb, multiscale_stats(fb, num_levels),
                          level_weights(log2_sigma, num_levels))


class _WDTerm(torch.autograd.Function):
    """WD of one feature map ``fa`` to a fixed target (its map ``fb``, statistics ``means_b``,
    ``stds_b`` and the level weights), with a hand-written backward pass: the same value and
    gradient as ``_wd_from_stats(fa, multiscale_stats(fa), ...)`` under autograd (tested to
    1e-6), in about half the passes over memory, since a training step spends most of its
    time here. The sqrt gradient passes the variance clamp and is capped, as ``_SafeSqrt``."""

    @staticmethod
    def forward(ctx, fa, fb, means_b, stds_b, weights):
        channels = fa.shape[1]
        d0 = fa - fb
        total = (weights[0] * d0 * d0).sum() / d0.numel()
        both, saved = torch.cat([fa, fa * fa], 1), []
        for mb, sb, w in zip(means_b, stds_b, weights[1:]):
            pooled = _lowpass_same(both)
            m = pooled[:, :channels]
            s = torch.sqrt(torch.clamp(pooled[:, channels:] - m * m, min=0.0))
            dm, ds = m - mb, s - sb
            total = total + (w * (dm * dm + ds * ds)).sum() / dm.numel()
            saved += [m, s, dm, ds]
            both = pooled[..., ::2, ::2]
        ctx.save_for_backward(fa, d0, *saved)
        ctx.weights = weights
        return total

    @staticmethod
    def backward(ctx, grad):
        fa, d0, *saved = ctx.saved_tensors
        weights, channels = ctx.weights, fa.shape[1]
        levels = len(saved) // 4
        from_above = None                     # gradient w.r.t. the decimated pooled stats
        for level in range(levels, 0, -1):
            m, s, dm, ds = saved[4 * (level - 1):4 * level]
            scale = (2 * grad / dm.numel()) * weights[level]
            g_var = scale * ds * torch.clamp(0.5 / s, max=SQRT_GRAD_LIMIT)
            g_pooled = torch.cat([scale * dm - 2 * m * g_var, g_var], 1)
            if from_above is not None:
                g_pooled[..., ::2, ::2] += from_above
            from_above = _lowpass_same(g_pooled)
        g_fa = (2 * grad / d0.numel()) * weights[0] * d0
        if from_above is not None:
            g_fa = g_fa + from_above[:, :channels] + 2 * fa * from_above[:, channels:]
        return g_fa, None, None, None, None


class WDToTarget:
    """WD (or WA-WD with ``band_weights``) of feature maps to one fixed target: the target's
    statistics and the sigma weights are computed once, and WA-WD's four subbands travel
    stacked along channels (one statistics pyramid per feature map, the band weight as a
    per-channel factor, folded into the level weights once), and each feature map's term is
    one ``_WDTerm`` with a hand-written backward pass. Equals ``multi_wd`` / ``wavelet_wd`` of
    the same arguments (value and gradient)."""

    def __init__(self, target_feats, log2_sigma, num_levels: int,
                 band_weights: dict[str, float] | None = None) -> None:
        self.num_levels, self.bands = num_levels, list(band_weights or {})
        self.terms = []                          # (target, its stats, level weights x channel weights)
        with torch.no_grad():
            for feat in target_feats:
                fb = self._stack(feat)
                sigma = _rescaled_sigma(log2_sigma, fb.shape[-2:])
                chan = None if band_weights is None else torch.cat(
                    [torch.full((feat.shape[1],), band_weights[b] / 4) for b in self.bands]
                ).to(feat)[None, :, None, None] * len(self.bands)
                weights = level_weights(sigma, num_levels)
                if chan is not None:   # mean over 4C channels of chan * map = sum_b w_b/4 * WD_b
                    weights = [w * chan for w in weights]
                self.terms.append((fb, multiscale_stats(fb, num_levels), weights))

    def _stack(self, feat: torch.Tensor) -> torch.Tensor:
        return _HaarStack.apply(feat, tuple(self.bands)) if self.bands else feat

    def __call__(self, feats) -> torch.Tensor:
        total = feats[0].new_zeros(())
        for feat, (fb, (means_b, stds_b), weights) in zip(feats, self.terms):
            total = total + _WDTerm.apply(self._stack(feat), fb, means_b, stds_b, weights)
        return total


def _rescaled_sigma(log2_sigma: torch.Tensor, hw) -> torch.Tensor:
    """Resize the sigma map to a feature map's grid and shrink sigma by the downsampling
    ratio (a coarse feature pixel already covers 2^k image pixels), capped at zero."""
    if tuple(log2_sigma.shape[-2:]) == tuple(hw):
        return log2_sigma
    resized = F.interpolate(log2_sigma, size=tuple(hw), mode="bilinear", align_corners=False,
                            antialias=True)
    ratio = 0.5 * (math.log2(log2_sigma.shape[-2] / hw[0]) + math.log2(log2_sigma.shape[-1] / hw[1]))
    return F.relu(resized - ratio)


def multi_wd(feats_a, feats_b, log2_sigma, num_levels: int = 4) -> torch.Tensor:
    return sum(wasserstein_distortion(a, b, _rescaled_sigma(log2_sigma, a.shape[-2:]), num_levels)
               for a, b in zip(feats_a, feats_b))


def haar_dwt(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """One level of the orthonormal 2D Haar transform (H, W even)."""
    a, b = x[..., 0::2, 0::2], x[..., 0::2, 1::2]
    c, d = x[..., 1::2, 0::2], x[..., 1::2, 1::2]
    return {"LL": (a + b + c + d) / 2, "LH": (a - b + c - d) / 2,
            "HL": (a + b - c - d) / 2, "HH": (a - b - c + d) / 2}


class _HaarStack(torch.autograd.Function):
    """``torch.cat([haar_dwt(x)[b] for b in bands], 1)`` by butterflies (a +- b, c +- d, then
    their sums and differences) without an autograd graph; the backward pass is the inverse
    transform of the gradient (the transform is orthonormal, so its adjoint is its inverse)."""

    @staticmethod
    def forward(ctx, x, bands):
        a, b = x[..., 0::2, 0::2], x[..., 0::2, 1::2]
        c, d = x[..., 1::2, 0::2], x[..., 1::2, 1::2]
        s1, d1, s2, d2 = a + b, a - b, c + d, c - d
        make = {"LL": lambda: s1 + s2, "LH": lambda: d1 + d2, "HL": lambda: s1 - s2, "HH": lambda: d1 - d2}
        ctx.bands, ctx.channels = bands, x.shape[1]
        return torch.cat([make[name]() for name in bands], 1).mul_(0.5)

    @staticmethod
    def backward(ctx, grad):
        parts = dict(zip(ctx.bands, grad.split(ctx.channels, 1)))
        zero = torch.zeros_like(next(iter(parts.values())))
        return haar_idwt({k: parts.get(k, zero) for k in ("LL", "LH", "HL", "HH")}), None


def haar_idwt(bands: dict[str, torch.Tensor]) -> torch.Tensor:
    ll, lh, hl, hh = bands["LL"], bands["LH"], bands["HL"], bands["HH"]
    a, b = (ll + lh + hl + hh) / 2, (ll - lh + hl - hh) / 2
    c, d = (ll + lh - hl - hh) / 2, (ll - lh - hl + hh) / 2
    out = ll.new_zeros(*ll.shape[:-2], 2 * ll.shape[-2], 2 * ll.shape[-1])
    out[..., 0::2, 0::2], out[..., 0::2, 1::2] = a, b
    out[..., 1::2, 0::2], out[..., 1::2, 1::2] = c, d
    return out


def wavelet_wd(feats_a, feats_b, log2_sigma, band_weights: dict[str, float],
               num_levels: int = 4) -> torch.Tensor:
    """WA-WD: WD per Haar subband of every feature map, weighted per band. The 1/4 makes
    unit band weights at sigma = 0 equal plain feature MSE (Parseval)."""
    total = log2_sigma.new_zeros(())
    for a, b in zip(feats_a, feats_b):
        bands_a, bands_b = haar_dwt(a), haar_dwt(b)
        sigma = _rescaled_sigma(log2_sigma, bands_a["LL"].shape[-2:])
        for name, weight in band_weights.items():
            total = total + weight * wasserstein_distortion(bands_a[name], bands_b[name], sigma,
                                                            num_levels) / 4
    return total


class RandomFeatures(torch.nn.Module):
    """Pixels + two ReLU conv layers with fixed-seed random weights (stand-in for VGG)."""

    def __init__(self, seed: int = 1234, width: int = 8) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        # buffers, so that .to(device) moves them
        self.register_buffer("w1", torch.randn(width, 3, 3, 3, generator=gen) * math.sqrt(2 / 27))
        self.register_buffer("w2", torch.randn(2 * width, width, 3, 3, generator=gen)
                             * math.sqrt(2 / (9 * width)))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h1 = F.relu(F.conv2d(x - 0.5, self.w1, padding=1))
        h2 = F.relu(F.conv2d(h1, self.w2, padding=1, stride=2))
        return [x, h1, h2]
