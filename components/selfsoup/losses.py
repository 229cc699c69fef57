"""The SSL objectives that cook ingredients, written as pure functions of tensors.

Each one is the small-scale counterpart of the official recipe (see CLAIMS.md for the
simplifications): MAE pixel reconstruction, "MoCoV3" as an InfoNCE between a predictor
output and a stop-grad copy of the same encoder (no momentum encoder, as in the official code),
MMCR's nuclear-norm objective, and LeJEPA's view-invariance + SIGReg (Epps-Pulley).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def mae_loss(pred: torch.Tensor, target: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Mean squared pixel error over masked patches only. pred/target (B, N, P), masked (B, N) bool."""
    per_patch = (pred - target).pow(2).mean(-1)
    return (per_patch * masked).sum() / masked.sum().clamp_min(1)


def norm_pix(target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-patch standardised pixels (MAE's norm_pix_loss target). target (B, N, P)."""
    mean, var = target.mean(-1, keepdim=True), target.var(-1, keepdim=True)
    return (target - mean) / (var + eps).sqrt()


def info_nce(q: torch.Tensor, k: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE where sample i of q must pick sample i of k; scaled by 2T as in MoCoV3."""
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    logits = q @ k.T / temperature
    return F.cross_entropy(logits, torch.arange(len(q), device=q.device)) * 2 * temperature


def mmcr_loss(z1: torch.Tensor, z2: torch.Tensor, local: bool = False) -> torch.Tensor:
    """-||C||_* / B with C the (B, d) matrix of per-sample view centroids of unit embeddings.

    Maximising the centroid nuclear norm spreads samples over many directions; the optional
    local term (+ mean per-sample nuclear norm of its views) pulls the views of a sample together.
    """
    z1, z2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
    centroids = (z1 + z2) / 2
    loss = -torch.linalg.matrix_norm(centroids, ord="nuc") / len(centroids)
    if local:
        views = torch.stack([z1, z2], dim=1)  # (B, 2, d)
        loss = loss + torch.linalg.matrix_norm(views, ord="nuc").mean()
    return loss


def epps_pulley(x: torch.Tensor, t_max: float = 3.0, knots: int = 17) -> torch.Tensor:
    """Epps-Pulley normality statistic per column of x (N, M) against N(0, 1).

    N * integral over t of |ECF(t) - exp(-t^2/2)|^2 exp(-t^2/2); the integrand is even in t,
    so we integrate on [0, t_max] with the trapezoid rule and double it.
    """
    t = torch.linspace(0.0, t_max, knots, device=x.device, dtype=x.dtype)
    gauss = torch.exp(-0.5 * t**2)
    xt = x.unsqueeze(-1) * t  # (N, M, K)
    real, imag = torch.cos(xt).mean(0), torch.sin(xt).mean(0)
    err = ((real - gauss) ** 2 + imag**2) * gauss  # (M, K)
    return 2 * torch.trapezoid(err, t, dim=-1) * x.shape[0]


def sigreg(z: torch.Tensor, num_slices: int = 256, generator: torch.Generator | None = None) -> torch.Tensor:
    """Sketched isotropic-Gaussian regulariser: mean Epps-Pulley over random unit directions."""
    directions = torch.randn(z.shape[-1], num_slices, generator=generator, device=z.device, dtype=z.dtype)
    directions = directions / directions.norm(dim=0, keepdim=True)
    return epps_pulley(z @ directions).mean()


def lejepa_loss(views: torch.Tensor, lam: float, num_slices: int = 256,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """(1 - lam) * view-prediction error + lam * SIGReg, for embeddings of V views (V, B, d).

    The invariance term is the squared distance to the view centroid averaged over views,
    samples AND embedding dimensions, as in LeJEPA's minimal code: summing over the dimension
    instead would weight it d times more and shrink the effective lam by that factor."""
    centre = views.mean(0, keepdim=True)
    invariance = (views - centre).pow(2).mean()
    regulariser = torch.stack([sigreg(v, num_slices, generator) for v in views]).mean()
    return (1 - lam) * invariance + lam * regulariser


def knn_neighbour_entropy(z: torch.Tensor, k: int = 16, temperature: float = 0.07) -> torch.Tensor:
    """Mean entropy of each sample's softmax over its k nearest in-batch neighbours (cosine).

    Low entropy = every embedding has a few clearly closest neighbours; self-seasoning
    minimises it to choose mixing weights without labels.
    """
    z = F.normalize(z, dim=-1)
    sim = z @ z.T
    sim = sim.masked_fill(torch.eye(len(z), dtype=torch.bool, device=z.device), float("-inf"))
    top = sim.topk(min(k, len(z) - 1), dim=-1).values / temperature
    p = top.softmax(-1)
    return -(p * top.log_softmax(-1)).sum(-1).mean()
