"""Token-wise visual evidence for the positive pathway, precomputed per video (cached, as in the
official code).

- Motion saliency ``w_m``: optical-flow magnitude. The official code uses OpenCV's Farneback
  flow; here a vectorised single-scale Lucas-Kanade flow (no OpenCV dependency), then the same
  post-processing: spatial Gaussian (sigma 1), temporal window (2 frames), soft threshold
  between mean + 0.1 std and mean + 0.9 std of the video.
- Visual saliency ``w_v``: the official code uses DINOv3 ViT-L/16 CLS->patch attention, which is
  not available offline; the substitute is spectral-residual saliency (Hou & Zhang, CVPR 2007).
Both are stored at pixel resolution (N, T, H, W) in [0, 1] and average-pooled to the backbone's
token grid when used (``pool_to_tokens``).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage


def _gray(videos: np.ndarray) -> np.ndarray:
    return videos.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32) / 255.0


def lucas_kanade(prev: np.ndarray, nxt: np.ndarray, sigma: float = 1.5, eps: float = 1e-4):
    """Dense flow (u, v) from ``prev`` to ``nxt`` (..., H, W) by windowed least squares."""
    mid = 0.5 * (prev + nxt)
    iy, ix = np.gradient(mid, axis=(-2, -1))
    it = nxt - prev
    spatial = [0] * (mid.ndim - 2) + [sigma, sigma]
    smooth = lambda a: ndimage.gaussian_filter(a, spatial, mode="nearest")  # noqa: E731
    sxx, sxy, syy = smooth(ix * ix), smooth(ix * iy), smooth(iy * iy)
    sxt, syt = smooth(ix * it), smooth(iy * it)
    det = sxx * syy - sxy**2 + eps
    u = (-syy * sxt + sxy * syt) / det
    v = (sxy * sxt - sxx * syt) / det
    return u, v


def motion_saliency(videos: np.ndarray, *, sigma: float = 1.0, window: int = 2, low: float = 0.1,
                    high: float = 0.9, lk_sigma: float = 1.5) -> np.ndarray:
    """(N, T, H, W, 3) uint8 -> (N, T, H, W) in [0, 1]."""
    gray = _gray(videos)
    u, v = lucas_kanade(gray[:, :-1], gray[:, 1:], lk_sigma)
    mag = np.sqrt(u**2 + v**2)
    mag = np.concatenate([mag[:, :1], mag], axis=1)          # frame t <- flow (t-1 -> t); t=0 copies
    mag = ndimage.gaussian_filter(mag, (0, 0, sigma, sigma), mode="nearest")
    if window > 1:                       # causal temporal window: mean of frames t-window+1 .. t
        padded = np.concatenate([np.repeat(mag[:, :1], window - 1, axis=1), mag], axis=1)
        mag = np.mean([padded[:, k:k + mag.shape[1]] for k in range(window)], axis=0)
    mu = mag.mean(axis=(1, 2, 3), keepdims=True)
    sd = mag.std(axis=(1, 2, 3), keepdims=True) + 1e-8
    lo, hi = mu + low * sd, mu + high * sd
    return np.clip((mag - lo) / (hi - lo), 0.0, 1.0).astype(np.float32)


def spectral_residual(videos: np.ndarray, smooth: float = 1.0) -> np.ndarray:
    """(N, T, H, W, 3) uint8 -> (N, T, H, W) spectral-residual saliency, each frame in [0, 1]."""
    gray = _gray(videos)
    spec = np.fft.fft2(gray)
    log_amp = np.log(np.abs(spec) + 1e-8)
    residual = log_amp - ndimage.uniform_filter(log_amp, (0, 0, 3, 3), mode="nearest")
    sal = np.abs(np.fft.ifft2(np.exp(residual + 1j * np.angle(spec)))) ** 2
    sal = ndimage.gaussian_filter(sal, (0, 0, smooth, smooth), mode="wrap")
    lo = sal.min(axis=(2, 3), keepdims=True)
    hi = sal.max(axis=(2, 3), keepdims=True)
    return ((sal - lo) / (hi - lo + 1e-12)).astype(np.float32)


def pool_to_tokens(sal: torch.Tensor, patch: int, tpatch: int = 1) -> torch.Tensor:
    """(N, T, H, W) -> (N, T // tpatch, P) by average pooling over each token's pixels and
    frames (row-major like the model)."""
    n, t, h, w = sal.shape
    pooled = F.avg_pool2d(sal.reshape(n * t, 1, h, w).float(), patch)
    return pooled.reshape(n, t // tpatch, tpatch, -1).mean(2)


def token_weights(w_m: torch.Tensor, w_v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """Official fusion: w = sigmoid(beta * w_m + (1 - beta) * w_v); beta (B,) per query."""
    beta = beta.view(-1, *([1] * (w_m.dim() - 1)))
    return torch.sigmoid(beta * w_m + (1 - beta) * w_v)


def precompute_saliency_stage(cfg, ctx) -> None:
    from components.common.io import load_torch, save_torch

    s = cfg.saliency
    bench_dir = ctx.inputs["build_benchmark"]
    stats = {}
    for i, split in enumerate(("train", "val", "test")):
        videos = load_torch(f"{bench_dir}/{split}_videos.pt").numpy()
        w_m = motion_saliency(videos, sigma=s.motion_sigma, window=s.motion_window, low=s.low_std,
                              high=s.high_std, lk_sigma=s.lk_sigma)
        w_v = spectral_residual(videos)
        save_torch(ctx.out_dir / f"{split}_saliency.pt",
                   {"motion": torch.from_numpy(w_m).half(), "visual": torch.from_numpy(w_v).half()})
        stats[f"{split}_motion_mean"] = float(w_m.mean())
        stats[f"{split}_visual_mean"] = float(w_v.mean())
        ctx.progress(i + 1, 3, f"saliency {split}")
    ctx.write_metrics(stats)
