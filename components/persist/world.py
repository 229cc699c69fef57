"""Procedural voxel worlds, the agent, its camera and actions (the CPU stand-in for Luanti).

Coordinates: a world is ``vox[x, y, z]`` (uint8 class labels, z up). Voxel (i, j, k) fills the
unit cube [i, i+1) x [j, j+1) x [k, k+1). The agent has a continuous position (its feet), an
eye 1.6 above them, a yaw (about z, 0 = +x) and a pitch. The "world frame" the models see is
an agent-centred crop whose horizontal origin snaps to multiples of the latent stride, so the
crop (and its latent grid) moves by whole latent cells.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# ---------------------------------------------------------------------------------- classes
CLASSES = ("air", "grass", "dirt", "stone", "sand", "water", "trunk", "leaves",
           "landmark_red", "landmark_magenta", "landmark_cyan")
N_CLASSES = len(CLASSES)
AIR, GRASS, DIRT, STONE, SAND, WATER, TRUNK, LEAVES, LM_RED, LM_MAGENTA, LM_CYAN = range(N_CLASSES)
LANDMARKS = (LM_RED, LM_MAGENTA, LM_CYAN)
# RGB in [0, 1]; index 0 is the sky colour (no hit). Hues are far apart so that a generated
# pixel can be mapped back to a class.
PALETTE = np.array([
    [0.62, 0.80, 0.98],   # sky (air)
    [0.30, 0.70, 0.20],   # grass
    [0.55, 0.36, 0.18],   # dirt
    [0.50, 0.50, 0.52],   # stone
    [0.90, 0.85, 0.45],   # sand
    [0.15, 0.30, 0.85],   # water
    [0.35, 0.20, 0.08],   # trunk
    [0.08, 0.40, 0.12],   # leaves
    [0.95, 0.10, 0.10],   # landmark red
    [0.90, 0.15, 0.85],   # landmark magenta
    [0.05, 0.90, 0.90],   # landmark cyan
], dtype=np.float32)

# ---------------------------------------------------------------------------------- actions
ACTIONS = ("noop", "forward", "back", "left", "right", "yaw_left", "yaw_right",
           "pitch_up", "pitch_down", "place", "break")
N_ACTIONS = len(ACTIONS)
(NOOP, FORWARD, BACK, LEFT, RIGHT, YAW_LEFT, YAW_RIGHT, PITCH_UP, PITCH_DOWN,
 PLACE, BREAK) = range(N_ACTIONS)
EYE_HEIGHT = 1.6
CAM_DIM = 10          # position relative to the crop centre (3), 6D rotation (6), fov (1)


@dataclass(frozen=True)
class EnvSpec:
    size: int = 48             # world is size x size x height
    height: int = 16
    crop: int = 16             # horizontal crop; the crop spans the whole height
    stride: int = 4            # latent stride: the crop origin snaps to multiples of it
    move_step: float = 0.5
    yaw_step_deg: float = 15.0
    pitch_step_deg: float = 10.0
    pitch_limit_deg: float = 40.0
    fov_deg: float = 70.0
    reach: float = 4.0

    @property
    def view_distance(self) -> float:
        """Everything within this Euclidean distance of the eye lies inside the crop, so the
        crop is the whole visible scene (the renderer shows sky beyond it)."""
        return self.crop / 2 - self.stride / 2


# ---------------------------------------------------------------------------------- worlds
def value_noise(shape: tuple[int, int], cell: int, rng: np.random.Generator) -> np.ndarray:
    """Bilinearly interpolated random lattice in [0, 1]."""
    gx, gy = shape[0] // cell + 2, shape[1] // cell + 2
    lattice = rng.random((gx, gy))
    x = np.arange(shape[0]) / cell
    y = np.arange(shape[1]) / cell
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = (x - x0)[:, None], (y - y0)[None, :]
    fx, fy = fx * fx * (3 - 2 * fx), fy * fy * (3 - 2 * fy)   # smoothstep
    a = lattice[x0][:, y0]
    b = lattice[x0 + 1][:, y0]
    c = lattice[x0][:, y0 + 1]
    d = lattice[x0 + 1][:, y0 + 1]
    return a * (1 - fx) * (1 - fy) + b * fx * (1 - fy) + c * (1 - fx) * fy + d * fx * fy


def generate_world(spec: EnvSpec, seed: int, n_trees: int, n_pillars: int,
                   water: bool = True, uniform: bool = False) -> np.ndarray:
    """Terrain from 2-octave value noise, trees and landmark pillars (so revisits carry
    distinctive content). ``uniform`` gives the flat all-grass control world."""
    rng = np.random.default_rng(seed)
    s, h = spec.size, spec.height
    vox = np.zeros((s, s, h), dtype=np.uint8)
    if uniform:
        vox[:, :, :3] = STONE
        vox[:, :, 3] = GRASS
        return vox
    noise = 0.65 * value_noise((s, s), 12, rng) + 0.35 * value_noise((s, s), 5, rng)
    lo, hi = 3, min(h // 2, 8)
    ground = (lo + noise * (hi - lo)).astype(int)          # top solid voxel z index
    water_level = lo + 1 if water else -1
    for x in range(s):
        for y in range(s):
            g = ground[x, y]
            vox[x, y, :max(g - 2, 1)] = STONE
            vox[x, y, max(g - 2, 1):g] = DIRT
            vox[x, y, g] = SAND if g <= water_level else GRASS
            if g < water_level:
                vox[x, y, g + 1:water_level + 1] = WATER
    margin = 2
    for _ in range(n_trees):
        x, y = rng.integers(margin, s - margin, size=2)
        g = ground[x, y]
        if vox[x, y, g] != GRASS or g + 5 >= h:
            continue
        vox[x, y, g + 1:g + 4] = TRUNK
        vox[x - 1:x + 2, y - 1:y + 2, g + 4] = LEAVES
        vox[x, y, g + 5] = LEAVES
        vox[x, y, g + 3] = TRUNK
    for _ in range(n_pillars):
        x, y = rng.integers(margin, s - margin, size=2)
        g = ground[x, y]
        top = min(g + 1 + int(rng.integers(2, 5)), h - 1)
        vox[x, y, g + 1:top] = LANDMARKS[int(rng.integers(len(LANDMARKS)))]
    return vox


def surface_z(vox: np.ndarray, x: int, y: int) -> int:
    """z of the first air voxel above the highest solid (non-water walkable) column top."""
    col = vox[x, y]
    solid = np.nonzero((col != AIR) & (col != LEAVES))[0]
    return int(solid.max()) + 1 if len(solid) else 0


def place_pillar(vox: np.ndarray, centre_xy: np.ndarray, width: int, height: int, cls: int,
                 avoid: np.ndarray | None = None) -> np.ndarray | None:
    """Stand a ``width`` x ``width`` x ``height`` pillar of ``cls`` on the surface around
    ``centre_xy`` (in place). Returns its voxels (N, 3), or None when it would leave the world,
    the height, or cover the column at ``avoid`` (the agent's feet)."""
    x0, y0 = (np.floor(np.asarray(centre_xy) - (width - 1) / 2)).astype(int)
    cols = [(x, y) for x in range(x0, x0 + width) for y in range(y0, y0 + width)]
    if any(not (0 <= x < vox.shape[0] and 0 <= y < vox.shape[1]) for x, y in cols):
        return None
    if avoid is not None and (int(avoid[0]), int(avoid[1])) in cols:
        return None
    cells = []
    for x, y in cols:
        z = surface_z(vox, x, y)
        if z + height > vox.shape[2]:
            return None
        cells += [(x, y, k) for k in range(z, z + height)]
    cells = np.array(cells, dtype=np.int64)
    vox[cells[:, 0], cells[:, 1], cells[:, 2]] = cls
    return cells


# ---------------------------------------------------------------------------------- agent
@dataclass
class Agent:
    pos: np.ndarray      # feet (x, y, z), float
    yaw: float           # radians
    pitch: float         # radians

    def copy(self) -> "Agent":
        return Agent(self.pos.copy(), self.yaw, self.pitch)

    @property
    def eye(self) -> np.ndarray:
        return self.pos + np.array([0.0, 0.0, EYE_HEIGHT])


def spawn(vox: np.ndarray, spec: EnvSpec, rng: np.random.Generator) -> Agent:
    lo, hi = spec.crop // 2, spec.size - spec.crop // 2
    for _ in range(100):
        x, y = rng.uniform(lo, hi, size=2)
        z = surface_z(vox, int(x), int(y))
        if z + 2 < spec.height and vox[int(x), int(y), z] == AIR:
            return Agent(np.array([x, y, float(z)]), float(rng.uniform(0, 2 * np.pi)), np.deg2rad(-20.0))
    raise RuntimeError("no free spawn cell")


def _try_move(vox: np.ndarray, spec: EnvSpec, agent: Agent, delta: np.ndarray) -> None:
    """Walk with collision: step up at most one block, fall to the ground, stay in bounds."""
    lo, hi = spec.crop // 2, spec.size - spec.crop // 2 - 1e-3
    nx, ny = np.clip(agent.pos[0] + delta[0], lo, hi), np.clip(agent.pos[1] + delta[1], lo, hi)
    z_new = surface_z(vox, int(nx), int(ny))
    if z_new - agent.pos[2] > 1 or z_new + 2 >= spec.height:
        return  # wall
    agent.pos = np.array([nx, ny, float(z_new)])


def step_agent(vox: np.ndarray, spec: EnvSpec, agent: Agent, action: int) -> None:
    """Apply one action in place (the world too, for place/break)."""
    fwd = np.array([np.cos(agent.yaw), np.sin(agent.yaw), 0.0])
    right = np.array([np.sin(agent.yaw), -np.cos(agent.yaw), 0.0])
    if action == FORWARD:
        _try_move(vox, spec, agent, spec.move_step * fwd)
    elif action == BACK:
        _try_move(vox, spec, agent, -spec.move_step * fwd)
    elif action == LEFT:
        _try_move(vox, spec, agent, -spec.move_step * right)
    elif action == RIGHT:
        _try_move(vox, spec, agent, spec.move_step * right)
    elif action == YAW_LEFT:
        agent.yaw = (agent.yaw + np.deg2rad(spec.yaw_step_deg)) % (2 * np.pi)
    elif action == YAW_RIGHT:
        agent.yaw = (agent.yaw - np.deg2rad(spec.yaw_step_deg)) % (2 * np.pi)
    elif action in (PITCH_UP, PITCH_DOWN):
        sign = 1 if action == PITCH_UP else -1
        lim = np.deg2rad(spec.pitch_limit_deg)
        agent.pitch = float(np.clip(agent.pitch + sign * np.deg2rad(spec.pitch_step_deg), -lim, lim))
    elif action in (PLACE, BREAK):
        from components.persist.raycast import cast_center

        hit = cast_center(vox, agent, spec)
        if hit is None or hit["depth"] > spec.reach:
            return
        cell, normal = hit["cell"], hit["normal"]
        if action == BREAK and cell[2] > 0:
            vox[tuple(cell)] = AIR
        elif action == PLACE:
            target = cell + normal
            if (0 <= target).all() and (target < vox.shape).all() and vox[tuple(target)] == AIR:
                feet = np.floor(agent.pos).astype(int)
                if not (target[0] == feet[0] and target[1] == feet[1]
                        and feet[2] <= target[2] <= feet[2] + 1):
                    vox[tuple(target)] = DIRT


# ---------------------------------------------------------------------------------- camera
def camera_basis(yaw: float, pitch: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """forward, right, up (right-handed: up = right x forward)."""
    cp, sp, cy, sy = np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw)
    f = np.array([cp * cy, cp * sy, sp])
    r = np.array([sy, -cy, 0.0])
    u = np.cross(r, f)
    return f, r, u


def crop_origin(agent: Agent, spec: EnvSpec) -> np.ndarray:
    """Integer (x, y, 0) origin of the agent-centred crop, snapped to the latent stride."""
    anchor = spec.stride * np.floor(agent.pos[:2] / spec.stride).astype(int) + spec.stride // 2
    return np.array([anchor[0] - spec.crop // 2, anchor[1] - spec.crop // 2, 0], dtype=np.int64)


def extract_crop(vox: np.ndarray, origin: np.ndarray, spec: EnvSpec) -> np.ndarray:
    """(crop, crop, height) labels; outside the world is air."""
    out = np.zeros((spec.crop, spec.crop, spec.height), dtype=np.uint8)
    x0, y0 = origin[:2]
    xs = slice(max(x0, 0), min(x0 + spec.crop, vox.shape[0]))
    ys = slice(max(y0, 0), min(y0 + spec.crop, vox.shape[1]))
    out[xs.start - x0:xs.stop - x0, ys.start - y0:ys.stop - y0] = vox[xs, ys, :spec.height]
    return out


def camera_vector(agent: Agent, origin: np.ndarray, spec: EnvSpec) -> np.ndarray:
    """c = (eye relative to the crop centre, 6D rotation [forward, up], fov), 10-dim."""
    f, _, u = camera_basis(agent.yaw, agent.pitch)
    centre = origin + np.array([spec.crop / 2, spec.crop / 2, spec.height / 2])
    return np.concatenate([agent.eye - centre, f, u, [np.deg2rad(spec.fov_deg)]]).astype(np.float32)


def camera_from_vector(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Eye (crop-centred), forward, right, up, fov from a camera vector (6D -> orthonormal)."""
    f = c[3:6] / np.linalg.norm(c[3:6])
    u = c[6:9] - (c[6:9] @ f) * f
    u = u / np.linalg.norm(u)
    r = np.cross(f, u)
    return c[:3], f, r, u, float(c[9])


def yaw_pitch_from_vector(c: np.ndarray) -> tuple[float, float]:
    f = c[3:6] / np.linalg.norm(c[3:6])
    return float(np.arctan2(f[1], f[0]) % (2 * np.pi)), float(np.arcsin(np.clip(f[2], -1, 1)))


def crop_shift(pos_local_old: np.ndarray, pos_local_new: np.ndarray, spec: EnvSpec) -> np.ndarray:
    """Integer (dx, dy, 0) move of the crop origin when the feet go from ``pos_local_old`` to
    ``pos_local_new`` (both in the old crop's coordinates). Crop origins are always congruent
    to stride/2 - crop/2 modulo the stride, which makes the snap computable locally."""
    r = (spec.stride // 2 - spec.crop // 2) % spec.stride
    old = np.floor((pos_local_old[..., :2] + r) / spec.stride)
    new = np.floor((pos_local_new[..., :2] + r) / spec.stride)
    shift = (spec.stride * (new - old)).astype(np.int64)
    return np.concatenate([shift, np.zeros_like(shift[..., :1])], axis=-1)


def feet_local(cam: np.ndarray, spec: EnvSpec) -> np.ndarray:
    """Feet position in crop coordinates (origin at the crop corner) from a camera vector."""
    centre = np.array([spec.crop / 2, spec.crop / 2, spec.height / 2])
    return cam[..., :3] + centre - np.array([0.0, 0.0, EYE_HEIGHT])
