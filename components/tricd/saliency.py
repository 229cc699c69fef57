"""Token-wise visual evidence for the positive pathway, precomputed per video (cached, as in the
official code).

- Motion saliency ``w_m``: optical-flow magnitude. The official code uses OpenCV's Farneback
  flow; here a vectorised single-scale Lucas-Kanade flow (no OpenCV dependency), then the same
  post-processing: spatial Gaussian (sigma 1), temporal window (2 frames), soft threshold
  between mean + 0.1 std and mean + 0.9 std of the video.
- Visual saliency ``w_v``: the official code uses DINOv3 ViT-L/16 CLS->patch attention of the
  last layer (``dino_saliency``, paper profile, from ``paper.dino_path``); the small profile has
  no DINO weights offline and uses spectral-residual saliency (Hou & Zhang, CVPR 2007).
Both are stored in [0, 1] at pixel resolution, or average-pooled by ``saliency.pool_px`` (paper:
the vision tower's 14-px patches, so 336-px frames are not stored at full size), as
(N, T, H / pool_px, W / pool_px), and pooled to the backbone's token grid when used
(``pool_to_tokens``).
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


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def dino_saliency(videos: np.ndarray, folder, device: str = "auto", dtype: str = "auto",
                  batch: int = 32) -> np.ndarray:
    """(N, T, H, W, 3) uint8 -> (N, T, H, W) in [0, 1]: the last layer's CLS -> patch attention
    of a DINO ViT (mean over heads; register tokens skipped), each frame resized to the model's
    image size, the map min-max normalised per frame and resized back to H x W."""
    import json
    from pathlib import Path

    from components.common.hf_models import load_model

    model = load_model(folder, "encoder", device=device, dtype=dtype, attn_implementation="eager")
    conf = model.config
    size = conf.image_size if isinstance(conf.image_size, int) else conf.image_size[0]
    patch = conf.patch_size if isinstance(conf.patch_size, int) else conf.patch_size[0]
    n_prefix = 1 + int(getattr(conf, "num_register_tokens", 0) or 0)
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    pre = Path(folder).expanduser() / "preprocessor_config.json"
    if pre.is_file():
        spec = json.loads(pre.read_text())
        mean, std = tuple(spec.get("image_mean", mean)), tuple(spec.get("image_std", std))
    n, t, h, w, _ = videos.shape
    frames = torch.from_numpy(videos.reshape(n * t, h, w, 3))
    dev = next(model.parameters()).device
    mdtype = next(model.parameters()).dtype
    out = []
    with torch.no_grad():
        for s in range(0, len(frames), batch):
            x = frames[s:s + batch].permute(0, 3, 1, 2).float() / 255.0
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
            x = (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
            att = model(pixel_values=x.to(dev, mdtype), output_attentions=True).attentions[-1]
            g = size // patch
            cls = att[:, :, 0, n_prefix:n_prefix + g * g].float().mean(1).reshape(-1, 1, g, g).cpu()
            lo = cls.amin(dim=(2, 3), keepdim=True)
            hi = cls.amax(dim=(2, 3), keepdim=True)
            cls = (cls - lo) / (hi - lo + 1e-12)
            out.append(F.interpolate(cls, size=(h, w), mode="bilinear", align_corners=False)[:, 0])
    return torch.cat(out).reshape(n, t, h, w).clamp(0, 1).numpy().astype(np.float32)


def pool_pixels(sal: np.ndarray, pool_px: int) -> np.ndarray:
    """(N, T, H, W) -> (N, T, H / pool_px, W / pool_px) by average pooling (1: unchanged)."""
    if pool_px == 1:
        return sal
    n, t, h, w = sal.shape
    if h % pool_px or w % pool_px:
        raise ValueError(f"frames of {h}x{w} px are not a multiple of saliency.pool_px = {pool_px}")
    return sal.reshape(n, t, h // pool_px, pool_px, w // pool_px, pool_px).mean(axis=(3, 5))


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
    p = cfg.paper
    bench_dir = ctx.inputs["build_benchmark"]
    stats = {}
    for i, split in enumerate(("train", "val", "test")):
        videos = load_torch(f"{bench_dir}/{split}_videos.pt").numpy()
        w_m = motion_saliency(videos, sigma=s.motion_sigma, window=s.motion_window, low=s.low_std,
                              high=s.high_std, lk_sigma=s.lk_sigma)
        if p.enabled and p.visual_saliency == "dino":
            w_v = dino_saliency(videos, p.dino_path, device=p.device, dtype=p.dtype)
        else:
            w_v = spectral_residual(videos)
        w_m, w_v = pool_pixels(w_m, s.pool_px), pool_pixels(w_v, s.pool_px)
        save_torch(ctx.out_dir / f"{split}_saliency.pt",
                   {"motion": torch.from_numpy(w_m).half(), "visual": torch.from_numpy(w_v).half(),
                    "pool_px": s.pool_px})
        stats[f"{split}_motion_mean"] = float(w_m.mean())
        stats[f"{split}_visual_mean"] = float(w_v.mean())
        ctx.progress(i + 1, 3, f"saliency {split}")
    ctx.write_metrics(stats)
