"""Procedural surveillance videos: long clips with one short anomaly event.

A video is fully determined by one row of the spec table (its seed and latent parameters), so
stages store the small spec and render pixels on demand. Design (observational aliasing):
- background walkers (dim blobs, slow constant velocity, bouncing) in every video;
- an "actor" (a brighter, larger blob) is on screen for ``actor_len`` frames in every anomalous
  video and, as a distractor, in ``distractor_rate`` of the normal ones;
- inside the actor's window a short event of ``event_len`` frames happens:
  running (4 px/frame), fighting (jitter: 2 px back and forth each frame), loitering (stands
  still) - these look like a normal actor in any single frame and differ only in consecutive
  frames - or falling (flattened blob) / object_left (a bright square), visible in one frame.
The event window is kept in the spec for analysis only; no policy or training loss reads it.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from components.anompi.config import CLASSES, Env

MOTION_CLASSES = ("running", "fighting", "loitering")     # need two consecutive frames
STATIC_CLASSES = ("falling", "object_left")               # visible in one frame
WALKER_SPEED = (0.3, 0.6)
RUN_SPEED = 4.0
JITTER = 1.0
TEXTURES = ("grass", "gravel", "brick")
DEFAULT_ENV = Env()            # fall_sigma / object_offset when a row does not carry them


def make_specs(n: int, cfg_env, rng: np.random.Generator, id_offset: int = 0) -> dict[str, np.ndarray]:
    """Latent parameters of ``n`` videos with uniform class priors."""
    T = cfg_env.n_frames
    label = rng.integers(0, len(CLASSES), n)
    actor_len = rng.integers(cfg_env.actor_len[0], cfg_env.actor_len[1] + 1, n)
    actor_start = np.array([rng.integers(0, T - L + 1) for L in actor_len])
    event_len = rng.integers(cfg_env.event_len[0], cfg_env.event_len[1] + 1, n)
    event_offset = np.array([rng.integers(0, L - w + 1) for L, w in zip(actor_len, event_len)])
    has_actor = (label != 0) | (rng.random(n) < cfg_env.distractor_rate)
    return {
        "video_id": np.arange(id_offset, id_offset + n),
        "seed": rng.integers(0, 2**31 - 1, n),
        "label": label.astype(np.int64),
        "has_actor": has_actor,
        "actor_start": actor_start,
        "actor_len": actor_len,
        # analysis only (localisation, oracle, analytic bound): never an input to a policy/loss
        "event_start": actor_start + event_offset,
        "event_len": event_len,
    }


@lru_cache(maxsize=4)
def _texture(name: str) -> np.ndarray:
    """A bundled scikit-image texture, read from the package folder without importing skimage
    (its import costs seconds on a loaded machine)."""
    import importlib.util
    from pathlib import Path

    from PIL import Image

    folder = Path(importlib.util.find_spec("skimage").submodule_search_locations[0]) / "data"
    img = np.asarray(Image.open(folder / f"{name}.png"), dtype=np.float32)
    if img.ndim == 3:
        img = img.mean(-1)
    return (img - img.min()) / (img.max() - img.min() + 1e-8)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    tex = _texture(TEXTURES[rng.integers(len(TEXTURES))])
    crop = 4 * size
    y, x = rng.integers(0, tex.shape[0] - crop), rng.integers(0, tex.shape[1] - crop)
    patch = tex[y:y + crop, x:x + crop].reshape(size, 4, size, 4).mean((1, 3))
    return 0.25 * patch


def _bounce(start: np.ndarray, steps: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Positions after cumulative displacements, reflected into [lo, hi]."""
    raw = start + np.cumsum(steps, axis=0)
    span = hi - lo
    m = np.mod(raw - lo, 2 * span)
    return lo + np.where(m > span, 2 * span - m, m)


def trajectories(row: dict, T: int, size: int, rng: np.random.Generator):
    """Blob centres (T, nb, 2), sigmas (T, nb, 2), intensities (T, nb); absent blobs have 0."""
    lo, hi = 1.0, size - 2.0
    n_walk = int(rng.integers(row["walkers"][0], row["walkers"][1] + 1))
    nb = n_walk + 2                                   # + actor + left object
    pos = np.zeros((T, nb, 2))
    sig = np.full((T, nb, 2), 0.8)
    inten = np.zeros((T, nb))
    for b in range(n_walk):
        ang, speed = rng.uniform(0, 2 * np.pi), rng.uniform(*WALKER_SPEED)
        step = np.tile([speed * np.cos(ang), speed * np.sin(ang)], (T, 1))
        pos[:, b] = _bounce(rng.uniform(lo, hi, 2), step, lo, hi)
        inten[:, b] = 0.5
    if row["has_actor"]:
        a, L = int(row["actor_start"]), int(row["actor_len"])
        e, w = int(row["event_start"]), int(row["event_len"])
        cls = CLASSES[int(row["label"])]
        ang, speed = rng.uniform(0, 2 * np.pi), rng.uniform(*WALKER_SPEED)
        direction = np.array([np.cos(ang), np.sin(ang)])
        step = np.tile(speed * direction, (L, 1))
        ev = slice(e - a, e - a + w)
        if cls == "running":
            step[ev] = RUN_SPEED * direction
        elif cls in ("loitering", "fighting", "falling"):
            step[ev] = 0.0
        if cls == "fighting":       # alternate +-JITTER perpendicular to the walking direction
            perp = np.array([-direction[1], direction[0]])
            sign = np.where(np.arange(w) % 2 == 0, 1.0, -1.0)
            jig = np.zeros((L, 2))
            jig[ev] = 2 * JITTER * sign[:, None] * perp
            jig[e - a + w:e - a + w + 1] = 0.0
            step = step + jig
            back = np.zeros((L, 2))
            if w % 2 == 1 and e - a + w < L:          # return to the path after the event
                back[e - a + w] = -2 * JITTER * perp
            step = step + back
        track = _bounce(rng.uniform(lo, hi, 2), step, lo, hi)
        pos[a:a + L, n_walk] = track
        inten[a:a + L, n_walk] = 1.0
        sig[a:a + L, n_walk] = 1.1
        if cls == "falling":
            sig[e:e + w, n_walk] = row.get("fall_sigma", DEFAULT_ENV.fall_sigma)
        if cls == "object_left":
            r_lo, r_hi = row.get("object_offset", DEFAULT_ENV.object_offset)
            ang_o, r = rng.uniform(0, 2 * np.pi), rng.uniform(r_lo, r_hi)
            pos[e:e + w, n_walk + 1] = np.clip(track[e - a] + r * np.array([np.cos(ang_o), np.sin(ang_o)]),
                                               lo, hi)
            inten[e:e + w, n_walk + 1] = row.get("object_intensity", DEFAULT_ENV.object_intensity)
            sig[e:e + w, n_walk + 1] = row.get("object_sigma", DEFAULT_ENV.object_sigma)
    return pos, sig, inten


def render(row: dict, env) -> np.ndarray:
    """(T, size, size) float32 frames in [0, 1] for one spec row (deterministic in its seed)."""
    T, size = env.n_frames, env.size
    rng = np.random.default_rng(int(row["seed"]))
    bg = _background(rng, size)
    pos, sig, inten = trajectories({**row, "walkers": env.walkers, "fall_sigma": env.fall_sigma,
                                    "object_offset": env.object_offset, "object_sigma": env.object_sigma,
                                    "object_intensity": env.object_intensity}, T, size, rng)
    grid = np.arange(size, dtype=np.float64)
    dy = (grid[None, None, :] - pos[:, :, 0:1]) / sig[:, :, 0:1]           # (T, nb, size)
    dx = (grid[None, None, :] - pos[:, :, 1:2]) / sig[:, :, 1:2]
    blobs = np.einsum("tb,tby,tbx->tyx", inten, np.exp(-0.5 * dy**2), np.exp(-0.5 * dx**2))
    frames = bg[None] + blobs + env.noise * rng.standard_normal((T, size, size))
    return np.clip(frames, 0.0, 1.0).astype(np.float32)


def render_all(specs: dict[str, np.ndarray], env, idx=None) -> np.ndarray:
    """Frames of many videos, (n, T, size, size) uint8 (quantised to keep memory small)."""
    idx = np.arange(len(specs["label"])) if idx is None else idx
    keys = list(specs)
    out = np.empty((len(idx), env.n_frames, env.size, env.size), np.uint8)
    for j, i in enumerate(idx):
        out[j] = np.round(255 * render({k: specs[k][i] for k in keys}, env))
    return out
