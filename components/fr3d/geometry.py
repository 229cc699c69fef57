"""Pose algebra and trajectory / depth metrics (numpy and torch), kept independent of the models.

- 6D rotation representation (Zhou et al. 2019): the first two columns of R, re-orthonormalised.
- Umeyama (1991) similarity alignment, ATE (RMSE of aligned positions) and RPE.
- AbsRel and delta1 (Eigen et al. 2014) with per-frame median scaling, as the paper's
  "depth_med" evaluation.
"""
from __future__ import annotations

import numpy as np
import torch


def rot6d_to_matrix(x: torch.Tensor) -> torch.Tensor:
    a1, a2 = x[..., 0:3], x[..., 3:6]
    b1 = torch.nn.functional.normalize(a1, dim=-1)
    b2 = torch.nn.functional.normalize(a2 - (b1 * a2).sum(-1, keepdim=True) * b1, dim=-1)
    b3 = torch.cross(b1, b2, dim=-1)
    return torch.stack([b1, b2, b3], dim=-1)          # columns b1, b2, b3


def matrix_to_rot6d(r: torch.Tensor) -> torch.Tensor:
    return torch.cat([r[..., :, 0], r[..., :, 1]], dim=-1)


def pose_from_9d(x: torch.Tensor) -> torch.Tensor:
    """(..., 9) = 6D rotation + translation -> (..., 4, 4)."""
    out = torch.zeros(*x.shape[:-1], 4, 4, dtype=x.dtype, device=x.device)
    out[..., :3, :3] = rot6d_to_matrix(x[..., :6])
    out[..., :3, 3] = x[..., 6:9]
    out[..., 3, 3] = 1.0
    return out


def relative_poses(poses: np.ndarray) -> np.ndarray:
    """Camera-to-world poses (..., T, 4, 4) -> motion of frame t in frame t-1's camera
    (identity at t = 0)."""
    rel = np.linalg.inv(poses[..., :-1, :, :]) @ poses[..., 1:, :, :]
    eye = np.broadcast_to(np.eye(4, dtype=poses.dtype), (*poses.shape[:-3], 1, 4, 4))
    return np.concatenate([eye, rel], -3)


def compose(start: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Chain relative motions (..., K, 4, 4) from a start pose (..., 4, 4): K poses."""
    out, cur = [], start
    for k in range(rel.shape[-3]):
        cur = cur @ rel[..., k, :, :]
        out.append(cur)
    return np.stack(out, -3)


def umeyama(src: np.ndarray, dst: np.ndarray, with_scale: bool = True):
    """Similarity (s, R, t) minimising sum ||dst - (s R src + t)||^2; src, dst (N, 3)."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    xs, xd = src - mu_s, dst - mu_d
    cov = xd.T @ xs / len(src)
    u, d, vt = np.linalg.svd(cov)
    sign = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[2, 2] = -1
    rot = u @ sign @ vt
    var = (xs ** 2).sum() / len(src)
    scale = float(np.trace(np.diag(d) @ sign) / var) if with_scale and var > 1e-12 else 1.0
    return scale, rot, mu_d - scale * rot @ mu_s


def rotation_angle_deg(r: np.ndarray) -> np.ndarray:
    cos = np.clip((np.trace(r, axis1=-2, axis2=-1) - 1) / 2, -1.0, 1.0)
    return np.degrees(np.arccos(cos))


def trajectory_errors(pred: np.ndarray, gt: np.ndarray, n_context: int) -> dict[str, float]:
    """pred, gt: camera-to-world poses (N, 4, 4) of context + forecast frames. Sim(3)-align all
    positions (Umeyama), then ATE = RMSE over the forecast frames, RPE_t / RPE_R = mean
    translation (aligned scale) / rotation (deg) error of consecutive relative motions from the
    last context frame onwards."""
    s, r, t = umeyama(pred[:, :3, 3], gt[:, :3, 3])
    aligned = (s * (r @ pred[:, :3, 3].T)).T + t
    err = np.linalg.norm(aligned - gt[:, :3, 3], axis=1)[n_context:]
    rel_p = np.linalg.inv(pred[n_context - 1:-1]) @ pred[n_context:]
    rel_g = np.linalg.inv(gt[n_context - 1:-1]) @ gt[n_context:]
    rel_p = rel_p.copy()
    rel_p[:, :3, 3] *= s
    delta = np.linalg.inv(rel_g) @ rel_p
    return {"ate": float(np.sqrt((err ** 2).mean())),
            "rpe_t": float(np.linalg.norm(delta[:, :3, 3], axis=1).mean()),
            "rpe_r": float(rotation_angle_deg(delta[:, :3, :3]).mean())}


def median_scale(pred: np.ndarray, gt: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return pred * (np.median(gt[valid]) / max(np.median(pred[valid]), 1e-9))


def depth_errors(pred: np.ndarray, gt: np.ndarray, mask: np.ndarray) -> tuple[float, float, int]:
    """AbsRel and delta1 over ``mask`` (pred already median-scaled); also the pixel count."""
    p, g = pred[mask], gt[mask]
    if len(g) == 0:
        return float("nan"), float("nan"), 0
    rel = np.abs(p - g) / g
    ratio = np.maximum(p / g, g / np.maximum(p, 1e-9))
    return float(rel.mean()), float((ratio < 1.25).mean()), int(len(g))
