"""Procedural driving-like scenes and an analytic ray caster (numpy only, no downloads).

World frame: x right, y down, z forward (right-handed, like an OpenCV camera), ground plane y = 0.
The ego camera sits at height ``cam_height`` (y = -cam_height), yawed to the road tangent and
pitched slightly down. Depth is the camera z-depth of the first ray hit (ground or box).

A road is a centreline made of straight and arc segments; buildings and poles line it (so an
upcoming turn is visible before the ego reaches it); cars are oriented boxes that drive along
the lanes at constant speed (the dynamic objects, with a per-pixel mask).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROAD_HALF = 3.5       # two lanes of 3.5 m
LANE = 1.75           # lane centre offset from the centreline (+ = right of travel direction)
DS = 0.5              # centreline sampling step, m

PALETTES = {
    "day": dict(sky_top=(110, 160, 230), sky_bottom=(205, 222, 240), road=(88, 88, 94),
                mark=(235, 235, 225), grass=(72, 132, 62), grass2=(58, 112, 50),
                building=((150, 110, 90), (200, 190, 170)), car=((20, 20, 20), (230, 230, 230)),
                pole=(120, 100, 80), fog=(205, 222, 240), light=1.0, fog_dist=70.0),
    "dusk": dict(sky_top=(55, 45, 95), sky_bottom=(235, 140, 95), road=(62, 56, 70),
                 mark=(240, 200, 120), grass=(95, 92, 52), grass2=(78, 74, 44),
                 building=((70, 60, 90), (150, 120, 130)), car=((40, 10, 10), (250, 200, 140)),
                 pole=(60, 50, 60), fog=(200, 130, 110), light=0.75, fog_dist=45.0),
}


def random_palette(rng: np.random.Generator) -> dict:
    """Teacher pre-training palettes: broad random colours and lighting (never a named palette)."""
    c = lambda lo=20, hi=245: tuple(int(v) for v in rng.integers(lo, hi, 3))  # noqa: E731
    top, bottom = c(), c()
    return dict(sky_top=top, sky_bottom=bottom, road=c(30, 140), mark=c(150, 255), grass=c(),
                grass2=c(), building=(c(), c()), car=(c(0, 128), c(128, 256)), pole=c(),
                fog=bottom, light=float(rng.uniform(0.6, 1.2)), fog_dist=float(rng.uniform(35, 90)))


# ----------------------------------------------------------------------------- geometry
def rot_y(a: np.ndarray | float) -> np.ndarray:
    """Rotation about the (down-pointing) y axis; yaw a maps +z to (sin a, 0, cos a)."""
    a = np.asarray(a, dtype=np.float64)
    c, s = np.cos(a), np.sin(a)
    z, o = np.zeros_like(a), np.ones_like(a)
    return np.stack([np.stack([c, z, s], -1), np.stack([z, o, z], -1), np.stack([-s, z, c], -1)], -2)


def rot_x(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]], dtype=np.float64)


def intrinsics(height: int, width: int, fov_deg: float) -> tuple[float, float, float]:
    """(f, cx, cy): square pixels, horizontal field of view ``fov_deg``."""
    f = (width / 2) / np.tan(np.radians(fov_deg) / 2)
    return float(f), width / 2, height / 2


def ray_dirs(height: int, width: int, fov_deg: float) -> np.ndarray:
    """(H*W, 3) camera-frame directions with unit z, so a ray parameter t is the z-depth."""
    f, cx, cy = intrinsics(height, width, fov_deg)
    v, u = np.meshgrid(np.arange(height) + 0.5, np.arange(width) + 0.5, indexing="ij")
    return np.stack([(u - cx) / f, (v - cy) / f, np.ones_like(u)], -1).reshape(-1, 3)


def camera_pose(x: float, z: float, yaw: float, height: float, pitch_deg: float) -> np.ndarray:
    """4x4 camera-to-world transform of a camera at (x, -height, z) with the given yaw/pitch."""
    pose = np.eye(4)
    pose[:3, :3] = rot_y(yaw) @ rot_x(-np.radians(pitch_deg))
    pose[:3, 3] = (x, -height, z)
    return pose


def ray_box(origin: np.ndarray, dirs: np.ndarray, center: np.ndarray, half: np.ndarray,
            yaw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slab test of rays against yawed boxes. origin (3,), dirs (P, 3), boxes (B, ...).
    Returns (t_hit (P, B) with inf where missed, entry axis (P, B): 0 x-face, 1 y-face, 2 z-face)."""
    c, s = np.cos(yaw)[None], np.sin(yaw)[None]                   # world -> box is R_y(yaw)^T
    rel = origin[None] - center
    o = (c[0] * rel[:, 0] - s[0] * rel[:, 2], rel[:, 1], s[0] * rel[:, 0] + c[0] * rel[:, 2])
    dx, dy, dz = dirs[:, 0:1], dirs[:, 1:2], dirs[:, 2:3]
    d = (c * dx - s * dz, np.broadcast_to(dy, (len(dirs), len(center))), s * dx + c * dz)
    near, far = [], []
    for k in range(3):
        dk = np.where(np.abs(d[k]) < 1e-12, 1e-12, d[k])
        t1 = (-half[None, :, k] - o[k][None]) / dk
        t2 = (half[None, :, k] - o[k][None]) / dk
        near.append(np.minimum(t1, t2))
        far.append(np.maximum(t1, t2))
    t_near = np.maximum(np.maximum(near[0], near[1]), near[2])
    t_far = np.minimum(np.minimum(far[0], far[1]), far[2])
    axis = np.where(near[0] >= t_near, 0, np.where(near[1] >= t_near, 1, 2))
    hit = (t_far >= t_near) & (t_near > 1e-6)
    return np.where(hit, t_near, np.inf), axis


# ----------------------------------------------------------------------------- scenes
@dataclass
class Road:
    s: np.ndarray      # arclength samples
    x: np.ndarray
    z: np.ndarray
    yaw: np.ndarray

    def at(self, s: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = np.clip(s, self.s[0], self.s[-1])
        return (np.interp(s, self.s, self.x), np.interp(s, self.s, self.z),
                np.interp(s, self.s, self.yaw))

    def offset(self, s, lateral) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Point ``lateral`` metres to the right of the centreline at arclength s."""
        x, z, yaw = self.at(s)
        return x + lateral * np.cos(yaw), z - lateral * np.sin(yaw), yaw


def make_road(segments: list[tuple[float, float]]) -> Road:
    """segments: (length m, curvature 1/m; > 0 turns right). Starts at the origin heading +z."""
    s_list, x_list, z_list, yaw_list = [0.0], [0.0], [0.0], [0.0]
    for length, kappa in segments:
        for _ in range(max(1, int(round(length / DS)))):
            yaw = yaw_list[-1]
            mid = yaw + 0.5 * kappa * DS
            x_list.append(x_list[-1] + DS * np.sin(mid))
            z_list.append(z_list[-1] + DS * np.cos(mid))
            yaw_list.append(yaw + kappa * DS)
            s_list.append(s_list[-1] + DS)
    return Road(*(np.asarray(a) for a in (s_list, x_list, z_list, yaw_list)))


def sample_scene(rng: np.random.Generator, *, n_frames: int, fps: float, speed: float,
                 turn_prob: float, cars_per_100m: float, turn_radius_range=(14.0, 30.0),
                 first_straight_range=(10.0, 55.0), road_length: float = 160.0) -> dict:
    """One scene as plain arrays (the gen_scenes record). The road starts with a straight of
    ``first_straight_range`` metres; the ego starts 12 m in, so a short first straight puts
    the first turn inside a few-second sequence."""
    s0 = 12.0
    segments = [(float(rng.uniform(*first_straight_range)), 0.0)]
    while sum(length for length, _ in segments) < road_length:
        if rng.random() < turn_prob:
            radius = float(rng.uniform(*turn_radius_range))
            angle = float(np.radians(rng.uniform(30.0, 90.0)))
            segments.append((radius * angle, float(rng.choice([-1.0, 1.0])) / radius))
        else:
            segments.append((float(rng.uniform(10.0, 35.0)), 0.0))
    road = make_road(segments)

    # ego: right lane, near-constant speed, a small lateral wobble
    t = np.arange(n_frames) / fps
    speed_t = speed * (1 + 0.03 * np.sin(2 * np.pi * t / rng.uniform(2.0, 5.0) + rng.uniform(0, 6.3)))
    ego_s = s0 + np.concatenate([[0.0], np.cumsum(speed_t[:-1] / fps)])
    wobble = 0.1 * np.sin(2 * np.pi * t / rng.uniform(2.0, 4.0) + rng.uniform(0, 6.3))
    ex, ez, eyaw = road.offset(ego_s, LANE + wobble)

    # static boxes: buildings and poles lining the road, dropped if they touch any road point
    boxes = []
    for side in (-1.0, 1.0):
        s = float(rng.uniform(0, 8))
        while s < road.s[-1]:
            w, d, h = rng.uniform(3, 9), rng.uniform(3, 8), rng.uniform(3, 12)
            lat = side * (ROAD_HALF + rng.uniform(3.0, 8.0) + d / 2)
            bx, bz, byaw = road.offset(s, lat)
            boxes.append((bx, -h / 2, bz, d / 2, h / 2, w / 2, byaw, 0))
            s += w + rng.uniform(1.0, 8.0)
        s = float(rng.uniform(0, 10))
        while s < road.s[-1]:
            h = rng.uniform(3, 6)
            bx, bz, byaw = road.offset(s, side * (ROAD_HALF + 1.2))
            boxes.append((bx, -h / 2, bz, 0.15, h / 2, 0.15, byaw, 1))
            s += rng.uniform(10, 25)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 8)
    dist = np.sqrt((boxes[:, None, 0] - road.x[None]) ** 2 + (boxes[:, None, 2] - road.z[None]) ** 2)
    reach = np.sqrt(boxes[:, 3] ** 2 + boxes[:, 5] ** 2)
    boxes = boxes[dist.min(1) - reach > ROAD_HALF + 0.3]

    # dynamic boxes: cars at constant speed along either lane
    n_cars = rng.poisson(cars_per_100m * road.s[-1] / 100.0)
    cars = []
    for _ in range(n_cars):
        if rng.random() < 0.5:      # same direction, ahead of the ego, never slower than 0.9 v
            s_start = float(rng.uniform(s0 + 10, road.s[-1] - 10))
            v = speed * float(rng.uniform(0.9, 1.3)) if speed > 0 else float(rng.uniform(3, 10))
            cars.append((s_start, v, LANE))
        else:                       # oncoming lane
            cars.append((float(rng.uniform(s0, road.s[-1])), -float(rng.uniform(4, 10)), -LANE))
    cars = np.asarray(cars, dtype=np.float64).reshape(-1, 3)
    car_s = cars[None, :, 0] + cars[None, :, 1] * t[:, None]              # (T, C)
    cx, cz, cyaw = road.offset(car_s, cars[None, :, 2])
    car_colour = rng.uniform(0, 1, (len(cars), 1))
    return dict(road_s=road.s, road_x=road.x, road_z=road.z, road_yaw=road.yaw,
                ego_x=ex, ego_z=ez, ego_yaw=eyaw, boxes=boxes,
                cars=np.stack([cx, cz, cyaw], -1).reshape(n_frames, -1, 3), car_colour=car_colour,
                building_colour=rng.uniform(0, 1, (len(boxes), 1)))


# ----------------------------------------------------------------------------- renderer
CAR_HALF = np.array([0.9, 0.75, 2.1])


def frustum_planes(height: int, width: int, fov_deg: float) -> np.ndarray:
    """(4, 3) outward normals (camera frame: x right, y down, z forward) of the left, right,
    top and bottom planes of the view frustum; every pixel ray lies inside all four."""
    f = intrinsics(height, width, fov_deg)[0]
    ah, av = np.arctan((width / 2) / f), np.arctan((height / 2) / f)
    return np.array([[np.cos(ah), 0, -np.sin(ah)], [-np.cos(ah), 0, -np.sin(ah)],
                     [0, np.cos(av), -np.sin(av)], [0, -np.cos(av), -np.sin(av)]])


def render_sequence(scene: dict, *, height: int, width: int, fov_deg: float, palette: dict,
                    cam_height: float, cam_pitch_deg: float, max_depth: float,
                    cull: bool = True) -> dict:
    """RGB (T,H,W,3) uint8, depth (T,H,W) float32 (0 = invalid: sky or beyond max_depth),
    dynamic mask (T,H,W) bool, camera-to-world poses (T,4,4). ``cull``: boxes whose bounding
    sphere lies wholly outside the view frustum are not ray-tested (no pixel ray can hit them,
    so the images are the same; v6, for speed)."""
    n_frames = len(scene["ego_x"])
    dirs_c = ray_dirs(height, width, fov_deg)
    planes = frustum_planes(height, width, fov_deg)
    road = Road(scene["road_s"], scene["road_x"], scene["road_z"], scene["road_yaw"])
    pal = {k: (np.asarray(v, dtype=np.float64) / 255.0 if isinstance(v, tuple) and not
               isinstance(v[0], tuple) else v) for k, v in palette.items()}
    boxes = scene["boxes"]
    rows = (np.arange(height) + 0.5)[:, None].repeat(width, 1).reshape(-1) / height
    rgb = np.zeros((n_frames, height * width, 3))
    depth = np.zeros((n_frames, height * width))
    dyn = np.zeros((n_frames, height * width), dtype=bool)
    poses = np.zeros((n_frames, 4, 4))
    for t in range(n_frames):
        pose = camera_pose(scene["ego_x"][t], scene["ego_z"][t], scene["ego_yaw"][t], cam_height,
                           cam_pitch_deg)
        poses[t] = pose
        origin, dirs = pose[:3, 3], dirs_c @ pose[:3, :3].T
        cars = scene["cars"][t]
        centers = np.concatenate([boxes[:, :3], np.stack(
            [cars[:, 0], np.full(len(cars), -CAR_HALF[1]), cars[:, 1]], -1)])
        halves = np.concatenate([boxes[:, 3:6], np.repeat(CAR_HALF[None], len(cars), 0)])
        yaws = np.concatenate([boxes[:, 6], cars[:, 2]])
        fwd = pose[:3, 2]
        rel = centers - origin[None]
        reach = np.linalg.norm(halves, axis=1)
        keep = (np.linalg.norm(rel, axis=1) < max_depth * 1.5 + reach) & (rel @ fwd > -reach)
        if cull:
            keep &= ((rel @ pose[:3, :3]) @ planes.T <= reach[:, None]).all(1)
        t_box = np.full((len(dirs), len(centers)), np.inf)
        axis = np.zeros((len(dirs), len(centers)), dtype=np.int64)
        if keep.any():
            t_box[:, keep], axis[:, keep] = ray_box(origin, dirs, centers[keep], halves[keep],
                                                    yaws[keep])
        idx = t_box.argmin(1)
        tb = t_box[np.arange(len(dirs)), idx]
        with np.errstate(divide="ignore"):
            tg = np.where(dirs[:, 1] > 1e-9, -origin[1] / dirs[:, 1], np.inf)
        t_hit = np.minimum(tb, tg)
        on_box, on_ground = np.isfinite(tb) & (tb <= tg), np.isfinite(tg) & (tg < tb)
        colour = np.zeros((len(dirs), 3))
        # sky: vertical gradient
        colour[:] = pal["sky_top"] + (pal["sky_bottom"] - pal["sky_top"]) * rows[:, None]
        # ground: road with dashed centre line and edge lines, checkered grass
        g = np.where(on_ground)[0]
        if len(g):
            p = origin[None] + tg[g, None] * dirs[g]
            d2 = (p[:, None, 0] - road.x[None]) ** 2 + (p[:, None, 2] - road.z[None]) ** 2
            near = d2.argmin(1)
            dx, dz = p[:, 0] - road.x[near], p[:, 2] - road.z[near]
            lat = dx * np.cos(road.yaw[near]) - dz * np.sin(road.yaw[near])
            s = road.s[near]
            checker = ((np.floor(p[:, 0] / 3) + np.floor(p[:, 2] / 3)) % 2).astype(bool)
            col = np.where(checker[:, None], pal["grass"], pal["grass2"])
            col = np.where((np.abs(lat) < ROAD_HALF)[:, None], pal["road"], col)
            mark = ((np.abs(lat) < 0.15) & ((s % 6.0) < 3.0)) | (
                (np.abs(lat) > ROAD_HALF - 0.3) & (np.abs(lat) < ROAD_HALF - 0.1))
            colour[g] = np.where(mark[:, None], pal["mark"], col)
        b = np.where(on_box)[0]
        if len(b):
            k = idx[b]
            is_car = k >= len(boxes)
            lo_b, hi_b = (np.asarray(c) / 255.0 for c in palette["building"])
            lo_c, hi_c = (np.asarray(c) / 255.0 for c in palette["car"])
            mix_b = scene["building_colour"][np.minimum(k, len(boxes) - 1)] if len(boxes) else 0.5
            mix_c = scene["car_colour"][np.clip(k - len(boxes), 0, None)] if len(cars) else 0.5
            col = np.where(is_car[:, None], lo_c + (hi_c - lo_c) * mix_c, lo_b + (hi_b - lo_b) * mix_b)
            if len(boxes):
                col = np.where((~is_car & (boxes[np.minimum(k, len(boxes) - 1), 7] == 1))[:, None],
                               pal["pole"], col)
            shade = np.array([0.75, 1.0, 0.9])[axis[b, k]]
            colour[b] = col * shade[:, None]
            dyn[t, b] = is_car
        hit = on_box | on_ground
        fog = np.exp(-np.where(hit, t_hit, 0.0) / pal["fog_dist"])[:, None]
        colour = np.where(hit[:, None], colour * fog + pal["fog"] * (1 - fog), colour)
        rgb[t] = np.clip(colour * pal["light"], 0, 1)
        valid = hit & (t_hit <= max_depth)
        depth[t] = np.where(valid, t_hit, 0.0)
        dyn[t] &= valid
    shape = (n_frames, height, width)
    return dict(rgb=(rgb.reshape(*shape, 3) * 255).round().astype(np.uint8),
                depth=depth.reshape(shape).astype(np.float32), dynamic=dyn.reshape(shape),
                pose=poses.astype(np.float32))
