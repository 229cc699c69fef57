"""LPIPS-VGG and DISTS on the plain-torch VGG-16 of ``features.py``, with their calibration
weights read from user-supplied files in the published formats (paper profile only).

The maintained packages (``lpips``, ``DISTS_pytorch``, ``piq``) all import torchvision, which
does not import beside this project's CPU torch wheel, so the two metrics are rebuilt here from
their reference code (richzhang/PerceptualSimilarity ``lpips/lpips.py``; dingkeyan93/DISTS
``DISTS_pytorch/DISTS_pt.py``) on the same VGG-16 trunk, with the same ImageNet VGG-16 state
dict (``distortion.vgg_weights``; both packages use torchvision's IMAGENET1K_V1 weights).

Key maps (nothing is downloaded; the user copies the files out of the packages' wheels):
- LPIPS v0.1 VGG: ``lpips/weights/v0.1/vgg.pth`` of the ``lpips`` package, a state dict with
  ``lin{k}.model.1.weight`` of shape (1, C_k, 1, 1), C = 64, 128, 256, 512, 512 for relu1_2 ...
  relu5_3 (``model.1`` because the published layers sit behind a Dropout; ``lin{k}.model.0.
  weight``, saved without dropout, is accepted too).
- DISTS: ``DISTS_pytorch/weights.pt`` of the ``DISTS_pytorch`` package, a dict with ``alpha``
  and ``beta`` of shape (1, 1475, 1, 1) (1475 = 3 + 64 + 128 + 256 + 512 + 512: the pixels and
  relu1_2 ... relu5_3 of a VGG-16 whose max-pools are replaced by L2 pooling).
"""
from __future__ import annotations

import torch

from components.re2ic.config import DISTS_LAYOUT, LPIPS_LAYOUT
from components.re2ic.features import _IMAGENET_MEAN, _IMAGENET_STD, VGG16Trunk

LPIPS_CHANNELS = (64, 128, 256, 512, 512)
DISTS_CHANNELS = (3, 64, 128, 256, 512, 512)
# LPIPS's ScalingLayer: the input in [-1, 1] is shifted / scaled per channel (v0.1)
_LPIPS_SHIFT = (-0.030, -0.088, -0.188)
_LPIPS_SCALE = (0.458, 0.448, 0.450)


def _channels(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)[None, :, None, None]


def lpips_linear_weights(state: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The five (1, C_k, 1, 1) calibration weights from an lpips-format state dict."""
    out = []
    for k, c in enumerate(LPIPS_CHANNELS):
        w = state.get(f"lin{k}.model.1.weight", state.get(f"lin{k}.model.0.weight"))
        if w is None or tuple(w.shape) != (1, c, 1, 1):
            raise ValueError(f"LPIPS weights: lin{k}.model.1.weight missing or not (1, {c}, 1, 1) "
                             f"(expected {LPIPS_LAYOUT})")
        out.append(w.float())
    return out


def normalize_channels(x: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """LPIPS's normalize_tensor: each pixel's feature vector divided by its L2 norm."""
    return x / (torch.sqrt(x.square().sum(1, keepdim=True) + eps) + eps)


class LPIPSVGG(torch.nn.Module):
    """LPIPS v0.1 with the VGG-16 trunk (Zhang et al. 2018). Images in [0, 1]; returns (B,).
    sum over layers k of mean_{h,w} sum_c w_kc (n(f_k(x)) - n(f_k(y)))^2."""

    def __init__(self, vgg_state: dict, lin_state: dict) -> None:
        super().__init__()
        self.trunk = VGG16Trunk(vgg_state, n_convs=13)
        for k, w in enumerate(lpips_linear_weights(lin_state)):
            self.register_buffer(f"lin{k}", w)
        self.register_buffer("shift", _channels(_LPIPS_SHIFT))
        self.register_buffer("scale", _channels(_LPIPS_SCALE))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        fx = self.trunk(((2 * x - 1) - self.shift) / self.scale)
        fy = self.trunk(((2 * y - 1) - self.shift) / self.scale)
        total = 0.0
        for k, (a, b) in enumerate(zip(fx, fy)):
            diff = (normalize_channels(a) - normalize_channels(b)).square()
            total = total + (diff * getattr(self, f"lin{k}")).sum(1).mean((1, 2))
        return total


def dists_weights(state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    n = sum(DISTS_CHANNELS)
    alpha, beta = state.get("alpha"), state.get("beta")
    for name, w in (("alpha", alpha), ("beta", beta)):
        if w is None or tuple(w.shape) != (1, n, 1, 1):
            raise ValueError(f"DISTS weights: {name} missing or not (1, {n}, 1, 1) (expected {DISTS_LAYOUT})")
    return alpha.float(), beta.float()


class DISTSVGG(torch.nn.Module):
    """DISTS (Ding et al. 2020): structure (correlation) and texture (global mean) similarity
    of VGG-16 features with L2 pooling, weighted by alpha / beta. Images in [0, 1]; (B,)."""

    def __init__(self, vgg_state: dict, weights: dict) -> None:
        super().__init__()
        self.trunk = VGG16Trunk(vgg_state, n_convs=13, pool="l2")
        alpha, beta = dists_weights(weights)
        self.register_buffer("alpha", alpha)
        self.register_buffer("beta", beta)
        self.register_buffer("mean", _channels(_IMAGENET_MEAN))
        self.register_buffer("std", _channels(_IMAGENET_STD))

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x] + self.trunk((x - self.mean) / self.std)

    def forward(self, x: torch.Tensor, y: torch.Tensor, c1: float = 1e-6, c2: float = 1e-6) -> torch.Tensor:
        w_sum = self.alpha.sum() + self.beta.sum()
        alphas = torch.split(self.alpha / w_sum, DISTS_CHANNELS, dim=1)
        betas = torch.split(self.beta / w_sum, DISTS_CHANNELS, dim=1)
        structure = texture = 0.0
        for a, b, alpha, beta in zip(self.features(x), self.features(y), alphas, betas):
            ma, mb = a.mean((2, 3), keepdim=True), b.mean((2, 3), keepdim=True)
            texture = texture + (alpha * (2 * ma * mb + c1) / (ma.square() + mb.square() + c1)).sum(1)
            va = (a - ma).square().mean((2, 3), keepdim=True)
            vb = (b - mb).square().mean((2, 3), keepdim=True)
            cov = (a * b).mean((2, 3), keepdim=True) - ma * mb
            structure = structure + (beta * (2 * cov + c2) / (va + vb + c2)).sum(1)
        return 1 - (texture + structure).flatten(1).squeeze(1)


def load_metric(name: str, vgg_path: str, weights_path: str) -> torch.nn.Module:
    vgg = torch.load(vgg_path, map_location="cpu", weights_only=True)
    weights = torch.load(weights_path, map_location="cpu", weights_only=True)
    cls = {"lpips": LPIPSVGG, "dists": DISTSVGG}[name]
    return cls(vgg, weights).eval()
