"""Distribution-level realism of decoded images: FID and KID on image patches (paper profile).

HiFiC (Mentzer et al. 2020) and C3-WD report FID / KID on patches because a few dozen Kodak /
CLIC images are too few samples: each image is cut into non-overlapping p x p patches, and
again on the grid shifted by p/2 (p = 256 in those papers). The published numbers use
InceptionV3 pool features; Inception weights do not load here (torchvision does not import
beside this project's torch), so the features are the spatial mean of relu5_3 of the local
ImageNet VGG-16 (``distortion.vgg_weights``, the same file WD, LPIPS and DISTS read). The
metrics are therefore named ``fid_vgg`` / ``kid_vgg``: they rank codecs the same way in
principle, but their values are not comparable to published Inception FID / KID.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy import linalg

from components.re2ic.features import _IMAGENET_MEAN, _IMAGENET_STD, VGG16Trunk

SET_METRICS = ("fid_vgg", "kid_vgg")


def image_patches(images, patch: int) -> np.ndarray:
    """(N, p, p, 3) patches: each image's non-overlapping p x p grid, then the grid shifted by
    p/2 in both directions (HiFiC's protocol). Images smaller than p give none."""
    out = []
    for img in images:
        h, w = img.shape[:2]
        for off in (0, patch // 2):
            for top in range(off, h - patch + 1, patch):
                for left in range(off, w - patch + 1, patch):
                    out.append(img[top:top + patch, left:left + patch])
    return np.stack(out) if out else np.zeros((0, patch, patch, 3), dtype=np.float32)


class PooledVGG(torch.nn.Module):
    """Spatial mean of relu5_3 of VGG-16 (ImageNet normalisation): one 512-d vector per image."""

    def __init__(self, vgg_state: dict) -> None:
        super().__init__()
        self.trunk = VGG16Trunk(vgg_state, n_convs=13)
        self.register_buffer("mean", torch.tensor(_IMAGENET_MEAN)[None, :, None, None])
        self.register_buffer("std", torch.tensor(_IMAGENET_STD)[None, :, None, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk((x - self.mean) / self.std)[-1].mean((2, 3))


def patch_features(net: torch.nn.Module, patches: np.ndarray, batch: int = 16) -> np.ndarray:
    x = torch.from_numpy(np.ascontiguousarray(patches, dtype=np.float32)).permute(0, 3, 1, 2)
    with torch.no_grad():
        return torch.cat([net(x[i:i + batch]) for i in range(0, len(x), batch)]).double().numpy()


def _psd_sqrt(cov: np.ndarray) -> np.ndarray:
    vals, vecs = linalg.eigh(cov)
    return (vecs * np.sqrt(np.clip(vals, 0, None))) @ vecs.T


def frechet_distance(mu_a, cov_a, mu_b, cov_b) -> float:
    """||mu_a - mu_b||^2 + tr(C_a + C_b - 2 (C_a C_b)^(1/2)) (Heusel et al. 2017). The trace
    of (C_a C_b)^(1/2) is taken as that of (C_a^(1/2) C_b C_a^(1/2))^(1/2) (same eigenvalues,
    but a symmetric matrix: stable when the covariances are singular, i.e. fewer samples than
    feature dimensions, as with a few dozen patches)."""
    root_a = _psd_sqrt(cov_a)
    inner = linalg.eigvalsh(root_a @ cov_b @ root_a)
    cross = np.sum(np.sqrt(np.clip(inner, 0, None)))
    return float(np.sum((mu_a - mu_b) ** 2) + np.trace(cov_a) + np.trace(cov_b) - 2 * cross)


def fid(feats_a: np.ndarray, feats_b: np.ndarray) -> float:
    """Fréchet distance of Gaussians fitted to two feature sets (rows = samples). With fewer
    samples than dimensions (a few dozen patches, 512 features) the covariances are singular
    and a matrix square root would add sqrt-of-rounding noise, so it is taken from the samples:
    with centred X_a (m x d), X_b (n x d), the eigenvalues of C_a C_b are the squared singular
    values of X_a X_b^T / sqrt((m-1)(n-1)), and tr (C_a C_b)^(1/2) is their sum."""
    xa, xb = feats_a - feats_a.mean(0), feats_b - feats_b.mean(0)
    m, n = len(xa), len(xb)
    if min(m, n) > xa.shape[1]:                  # many samples: the d x d route is cheaper
        return frechet_distance(feats_a.mean(0), np.cov(feats_a, rowvar=False),
                                feats_b.mean(0), np.cov(feats_b, rowvar=False))
    cross = np.linalg.svd(xa @ xb.T, compute_uv=False).sum() / np.sqrt((m - 1) * (n - 1))
    trace_a, trace_b = np.sum(xa * xa) / (m - 1), np.sum(xb * xb) / (n - 1)
    mean_gap = np.sum((feats_a.mean(0) - feats_b.mean(0)) ** 2)
    return float(mean_gap + trace_a + trace_b - 2 * cross)


def kid(feats_a: np.ndarray, feats_b: np.ndarray) -> float:
    """Unbiased MMD^2 with the cubic polynomial kernel k(x, y) = (x.y / d + 1)^3 (Bińkowski et
    al. 2018), on the whole sets (KID's usual subsets are for thousands of samples)."""
    d = feats_a.shape[1]
    k_aa, k_bb = (feats_a @ feats_a.T / d + 1) ** 3, (feats_b @ feats_b.T / d + 1) ** 3
    k_ab = (feats_a @ feats_b.T / d + 1) ** 3
    m, n = len(feats_a), len(feats_b)
    off_aa = (k_aa.sum() - np.trace(k_aa)) / (m * (m - 1))
    off_bb = (k_bb.sum() - np.trace(k_bb)) / (n * (n - 1))
    return float(off_aa + off_bb - 2 * k_ab.mean())


def set_quality(net, originals, decoded, patch: int, metrics) -> dict[str, float]:
    """``metrics`` (of SET_METRICS) between the patches of the originals and of their decoded
    versions (the same images, so the same patch grid)."""
    pa, pb = image_patches(originals, patch), image_patches(decoded, patch)
    if len(pa) < 2:
        raise ValueError(f"quality.patch = {patch}: fewer than 2 patches in the test images")
    fa, fb = patch_features(net, pa), patch_features(net, pb)
    funcs = {"fid_vgg": fid, "kid_vgg": kid}
    return {name: funcs[name](fb, fa) for name in metrics} | {"n_patches": len(fa)}
