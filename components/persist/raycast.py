"""Voxel ray casting (Amanatides-Woo DDA), vectorised over all rays of many frames.

One routine serves two roles:
- the ground-truth renderer (first hit -> class, depth, shaded RGB, per-voxel texture, fog);
- the projection R(c, w) of the paper: the first ``layers`` non-air voxels along each pixel
  ray with their linear camera-space depths (the paper rasterises a voxel mesh with depth
  peeling; ray marching gives the same depth-ordered layers).
Rays are ``origin + t * dir`` with ``dir = forward + x right + y up`` (not normalised), so the
ray parameter ``t`` is the linear camera-space depth.
"""
from __future__ import annotations

import numpy as np

from components.persist.world import AIR, PALETTE, Agent, EnvSpec, camera_basis

LIGHT = np.array([0.5, 0.3, 0.8]) / np.linalg.norm([0.5, 0.3, 0.8])


def pixel_rays(f: np.ndarray, r: np.ndarray, u: np.ndarray, fov: float, hw: tuple[int, int]
               ) -> np.ndarray:
    """(H, W, 3) unnormalised ray directions with unit forward component."""
    h, w = hw
    tan = np.tan(fov / 2)
    xs = (2 * (np.arange(w) + 0.5) / w - 1) * tan
    ys = (1 - 2 * (np.arange(h) + 0.5) / h) * tan
    return f[None, None] + xs[None, :, None] * r[None, None] + ys[:, None, None] * u[None, None]


def cast(vox: np.ndarray, origins: np.ndarray, dirs: np.ndarray, layers: int = 1,
         max_dist: float = np.inf, skip: tuple[int, ...] = (AIR,),
         grid_index: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """First ``layers`` voxels whose class is not in ``skip`` along each ray.

    ``vox`` (X, Y, Z) labels, or (G, X, Y, Z) with ``grid_index`` (N,) naming each ray's
    grid; ``origins``/``dirs``
    (N, 3) in voxel units of that grid. Hits farther than ``max_dist`` (Euclidean) are
    dropped. Returns ``cls`` (N, L) (0 = none), ``depth`` (N, L) (inf = none), ``cell``
    (N, L, 3) int (-1 = none), ``normal`` (N, L, 3) int (the face entered through).
    """
    per_ray = vox.ndim == 4
    shape = np.array(vox.shape[-3:])
    n = len(origins)
    d = np.where(np.abs(dirs) < 1e-12, 1e-12, dirs)
    norm = np.linalg.norm(dirs, axis=1)
    cell = np.floor(origins).astype(np.int64)
    step = np.sign(d).astype(np.int64)
    t_max = ((cell + (step > 0)) - origins) / d
    t_delta = np.abs(1.0 / d)
    t_enter = np.zeros(n)
    normal = np.zeros((n, 3), dtype=np.int64)
    out_cls = np.zeros((n, layers), dtype=np.uint8)
    out_depth = np.full((n, layers), np.inf)
    out_cell = np.full((n, layers, 3), -1, dtype=np.int64)
    out_normal = np.zeros((n, layers, 3), dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    active = np.ones(n, dtype=bool)
    # the number of cell crossings within max_dist bounds the loop
    limit = int(3 * (min(max_dist, float(shape.sum())) + 2)) if np.isfinite(max_dist) else int(shape.sum() * 2 + 6)
    idx = np.arange(n)
    for _ in range(limit):
        a = idx[active]
        if len(a) == 0:
            break
        c = cell[a]
        inside = ((c >= 0) & (c < shape)).all(axis=1)
        lab = np.zeros(len(a), dtype=np.uint8)
        ci = c[inside]
        if per_ray:
            lab[inside] = vox[grid_index[a[inside]], ci[:, 0], ci[:, 1], ci[:, 2]]
        else:
            lab[inside] = vox[ci[:, 0], ci[:, 1], ci[:, 2]]
        hit = ~np.isin(lab, skip) & inside
        too_far = t_enter[a] * norm[a] > max_dist
        hit &= ~too_far
        if hit.any():
            h = a[hit]
            k = count[h]
            out_cls[h, k] = lab[hit]
            out_depth[h, k] = t_enter[h]
            out_cell[h, k] = cell[h]
            out_normal[h, k] = normal[h]
            count[h] += 1
        # rays that left the grid moving outward can never come back
        leaving = ~inside & (((c < 0) & (step[a] <= 0)) | ((c >= shape) & (step[a] >= 0))).any(axis=1)
        done = too_far | (count[a] >= layers) | leaving
        active[a[done]] = False
        a = a[~done]
        axis = np.argmin(t_max[a], axis=1)
        t_enter[a] = t_max[a, axis]
        cell[a, axis] += step[a, axis]
        t_max[a, axis] += t_delta[a, axis]
        normal[a] = 0
        normal[a, axis] = -step[a, axis]
    return {"cls": out_cls, "depth": out_depth, "cell": out_cell, "normal": out_normal}


def camera_rays(eye: np.ndarray, yaw: float, pitch: float, fov: float, hw: tuple[int, int]
                ) -> tuple[np.ndarray, np.ndarray]:
    f, r, u = camera_basis(yaw, pitch)
    dirs = pixel_rays(f, r, u, fov, hw).reshape(-1, 3)
    return np.repeat(eye[None], len(dirs), axis=0), dirs


def voxel_hash(cell: np.ndarray) -> np.ndarray:
    """Deterministic per-voxel value in [-1, 1] (the texture that w does not carry)."""
    c = cell.astype(np.uint64)
    h = (c[..., 0] * np.uint64(73856093)) ^ (c[..., 1] * np.uint64(19349663)) ^ (c[..., 2] * np.uint64(83492791))
    return ((h % np.uint64(1000)).astype(np.float64) / 999.0) * 2 - 1


def shade(cls: np.ndarray, depth: np.ndarray, cell: np.ndarray, normal: np.ndarray,
          view_distance: float, texture: float = 0.05, fog: float = 0.4) -> np.ndarray:
    """RGB in [0, 1]: palette x (0.6 + 0.4 |n.l|) x (1 +- texture), blended to the sky by fog."""
    base = PALETTE[cls].astype(np.float64)
    lam = 0.6 + 0.4 * np.abs(normal @ LIGHT)
    tex = 1 + texture * voxel_hash(np.maximum(cell, 0))
    rgb = base * (lam * tex)[..., None]
    frac = np.clip(np.where(np.isfinite(depth), depth, 0) / view_distance, 0, 1)
    rgb = rgb * (1 - fog * frac[..., None]) + PALETTE[0] * (fog * frac[..., None])
    return np.where((cls == AIR)[..., None], PALETTE[0], np.clip(rgb, 0, 1))


def render_views(vox: np.ndarray, agents: list[Agent], spec: EnvSpec, hw: tuple[int, int]
                 ) -> dict[str, np.ndarray]:
    """Ground-truth frames of several agent poses in one world (one batched cast).

    Returns ``rgb`` (B, H, W, 3) float32, ``cls`` (B, H, W) uint8, ``depth`` (B, H, W)
    float32 (0 where sky), ``cell`` (B, H, W, 3) world voxel of the first hit (-1 = sky).
    """
    fov = np.deg2rad(spec.fov_deg)
    origins, dirs = zip(*(camera_rays(a.eye, a.yaw, a.pitch, fov, hw) for a in agents))
    hit = cast(vox, np.concatenate(origins), np.concatenate(dirs), 1, spec.view_distance)
    b = len(agents)
    cls, depth = hit["cls"][:, 0], hit["depth"][:, 0]
    rgb = shade(cls, depth, hit["cell"][:, 0], hit["normal"][:, 0], spec.view_distance)
    return {"rgb": rgb.reshape(b, *hw, 3).astype(np.float32),
            "cls": cls.reshape(b, *hw),
            "depth": np.where(np.isfinite(depth), depth, 0).reshape(b, *hw).astype(np.float32),
            "cell": hit["cell"][:, 0].reshape(b, *hw, 3)}


def cast_center(vox: np.ndarray, agent: Agent, spec: EnvSpec) -> dict | None:
    """The voxel under the crosshair (for place/break)."""
    f, _, _ = camera_basis(agent.yaw, agent.pitch)
    hit = cast(vox, agent.eye[None], f[None], 1, spec.reach + 1)
    if hit["cls"][0, 0] == AIR:
        return None
    return {"cell": hit["cell"][0, 0], "normal": hit["normal"][0, 0], "depth": float(hit["depth"][0, 0])}


def project(crops: np.ndarray, cams: np.ndarray, hw: tuple[int, int], layers: int,
            view_distance: float) -> dict[str, np.ndarray]:
    """R(c, w): the first ``layers`` non-air voxels of each crop along each pixel ray.

    ``crops`` (B, X, Y, Z) class labels (decoded world frames), ``cams`` (B, 10) camera
    vectors relative to the crop centre. Returns ``cls`` (B, L, H, W) uint8 and ``depth``
    (B, L, H, W) float32 (0 where no layer), and ``cell`` (B, L, H, W, 3) crop voxel indices.
    """
    from components.persist.world import camera_from_vector

    b = len(crops)
    centre = np.array(crops.shape[1:4]) / 2
    origins, dirs = [], []
    for c in cams:
        eye, f, r, u, fov = camera_from_vector(np.asarray(c, dtype=np.float64))
        dd = pixel_rays(f, r, u, fov, hw).reshape(-1, 3)
        dirs.append(dd)
        origins.append(np.repeat((eye + centre)[None], len(dd), axis=0))
    n = hw[0] * hw[1]
    hit = cast(crops, np.concatenate(origins), np.concatenate(dirs), layers, view_distance,
               grid_index=np.repeat(np.arange(b), n))
    depth = np.where(np.isfinite(hit["depth"]), hit["depth"], 0)
    return {"cls": hit["cls"].reshape(b, *hw, layers).transpose(0, 3, 1, 2),
            "depth": depth.reshape(b, *hw, layers).transpose(0, 3, 1, 2).astype(np.float32),
            "cell": hit["cell"].reshape(b, *hw, layers, 3).transpose(0, 3, 1, 2, 4)}
