"""Procedural videos from a scene program (numpy only; images from scikit-image / scikit-learn).

A scene program is a plain dict: a background (texture or photo), a camera operation, and two
objects (shape x colour) with a world-space motion and an optional appear/disappear event. The
renderer draws the objects on a world canvas and moves a camera window over it (pan = sliding
crop, zoom = shrinking crop resized back), so every question about the video can be answered
from the program alone. Written to be shareable (anompi needs the same kind of generator).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

COLORS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (50, 80, 230),
          "yellow": (230, 220, 40)}
SHAPES = ("square", "circle", "triangle")
MOTIONS = ("still", "left", "right", "up", "down")
EVENTS = ("none", "appears", "disappears")
CAMERAS = ("still", "pans_left", "pans_right", "zooms_in")
SCENES = ("grass", "brick", "coffee", "china")
OBJ = 5            # object side in world pixels
_STEP = {"still": (0, 0), "left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}


@lru_cache(maxsize=None)
def _background_source(scene: str) -> np.ndarray:
    """A 64x64 RGB float image of the scene, dimmed so coloured objects stand out."""
    from skimage import data
    from skimage.transform import resize

    if scene == "china":
        from sklearn.datasets import load_sample_image

        img = load_sample_image("china.jpg")
    else:
        img = getattr(data, scene)()
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    img = resize(img[..., :3], (64, 64), anti_aliasing=True, preserve_range=True)
    return (0.45 * img).astype(np.float32)


def shape_mask(shape: str, size: int = OBJ) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    c = (size - 1) / 2
    if shape == "square":
        return np.ones((size, size), bool)
    if shape == "circle":
        return (yy - c) ** 2 + (xx - c) ** 2 <= (size / 2) ** 2 - 0.5
    if shape == "triangle":  # apex up
        return np.abs(xx - c) <= yy / 2 + 0.01
    raise ValueError(shape)


def sample_scene(rng: np.random.Generator, frames: int, world: int) -> dict:
    """A random scene program: two objects with distinct shapes and colours."""
    shapes = rng.choice(SHAPES, size=2, replace=False)
    colors = rng.choice(list(COLORS), size=2, replace=False)
    times = rng.choice(np.arange(2, frames - 1), size=2, replace=False)  # distinct event times
    margin = OBJ + 2
    objects = []
    for i in range(2):
        motion = str(rng.choice(MOTIONS))
        x0, y0 = (int(v) for v in rng.integers(margin, world - margin - OBJ + 1, size=2))
        event = str(rng.choice(EVENTS, p=[0.2, 0.4, 0.4]))
        objects.append({"shape": str(shapes[i]), "color": str(colors[i]), "motion": motion,
                        "x0": x0, "y0": y0, "event": event,
                        "t_event": int(times[i]) if event != "none" else -1})
    return {"scene": str(rng.choice(SCENES)), "camera": str(rng.choice(CAMERAS, p=[0.4, 0.2, 0.2, 0.2])),
            "bg_x": int(rng.integers(0, 64 - world + 1)), "bg_y": int(rng.integers(0, 64 - world + 1)),
            "frames": frames, "world": world, "objects": objects}


def object_position(obj: dict, t: int, world: int) -> tuple[int, int]:
    """Top-left world position at frame t (motion of 1 px per frame, kept inside the world)."""
    dx, dy = _STEP[obj["motion"]]
    lo, hi = 4, world - 4 - OBJ          # stays inside the still camera's view
    x = min(max(obj["x0"] + dx * t, lo), hi)     # python min/max: np.clip on scalars is slow
    y = min(max(obj["y0"] + dy * t, lo), hi)
    return x, y


def visible(obj: dict, t: int) -> bool:
    if obj["event"] == "appears":
        return t >= obj["t_event"]
    if obj["event"] == "disappears":
        return t < obj["t_event"]
    return True


def view_side(world: int) -> int:
    """World pixels a still camera sees (two thirds of the world, so pans have room to move);
    the crop is resampled to the frame size, so frames of any size show the same view."""
    return round(2 * world / 3)


def camera_window(camera: str, t: int, frames: int, world: int, size: int) -> tuple[float, float, float]:
    """(x, y, side) of the camera crop in world pixels at frame t; ``size`` is the still view's
    side in world pixels (``view_side(world)``, not the frame size)."""
    centre = (world - size) / 2
    progress = t / max(1, frames - 1)
    span = world - size
    if camera == "pans_right":   # the camera moves right: content drifts left in the frame
        return progress * span, centre, size
    if camera == "pans_left":
        return (1 - progress) * span, centre, size
    if camera == "zooms_in":     # the crop shrinks to 60% of the frame size, centred
        side = world - progress * (world - 0.6 * size)
        off = (world - side) / 2
        return off, off, side
    return centre, centre, size


def render_world(program: dict, t: int) -> np.ndarray:
    world = program["world"]
    bg = _background_source(program["scene"])
    canvas = bg[program["bg_y"]:program["bg_y"] + world, program["bg_x"]:program["bg_x"] + world].copy()
    for obj in program["objects"]:
        if not visible(obj, t):
            continue
        x, y = object_position(obj, t, world)
        mask = shape_mask(obj["shape"])
        canvas[y:y + OBJ, x:x + OBJ][mask] = COLORS[obj["color"]]
    return canvas


def render(program: dict, size: int) -> np.ndarray:
    """(T, size, size, 3) uint8 video of the program."""
    frames, world = program["frames"], program["world"]
    out = np.empty((frames, size, size, 3), np.uint8)
    grid = (np.arange(size) + 0.5) / size
    for t in range(frames):
        canvas = render_world(program, t)
        x, y, side = camera_window(program["camera"], t, frames, world, view_side(world))
        cols = np.clip((x + grid * side).astype(int), 0, world - 1)   # nearest-neighbour crop
        rows = np.clip((y + grid * side).astype(int), 0, world - 1)
        out[t] = np.clip(canvas[rows][:, cols], 0, 255).astype(np.uint8)
    return out


def mean_position(obj: dict, frames: int, world: int) -> tuple[float, float]:
    """Mean world-space centre over the frames where the object is visible."""
    return _mean_position(obj["x0"], obj["y0"], obj["motion"], obj["event"], obj["t_event"], frames, world)


@lru_cache(maxsize=65536)
def _mean_position(x0, y0, motion, event, t_event, frames, world) -> tuple[float, float]:
    # cached on the fields it reads: question generation asks for the same objects' positions
    # millions of times (the v12 pretrain QA: ~2.7 M calls for 9,000 objects)
    obj = {"x0": x0, "y0": y0, "motion": motion, "event": event, "t_event": t_event}
    pts = [object_position(obj, t, world) for t in range(frames) if visible(obj, t)]
    xs, ys = zip(*pts)
    return sum(xs) / len(xs) + OBJ / 2, sum(ys) / len(ys) + OBJ / 2


PAIRS = tuple((c, s) for c in COLORS for s in SHAPES)   # 12 colour-shape classes


def frame_centre(program: dict, obj: dict, t: int, size: int) -> tuple[float, float]:
    """Centre of the object in frame pixels at frame t (may lie outside the frame)."""
    x, y = object_position(obj, t, program["world"])
    world = program["world"]
    cx, cy, side = camera_window(program["camera"], t, program["frames"], world, view_side(world))
    return (x + OBJ / 2 - cx) / side * size, (y + OBJ / 2 - cy) / side * size


def token_labels(program: dict, size: int, token_px: int, tpatch: int = 1) -> np.ndarray:
    """(T // tpatch, P, 12 + 5) multi-hot: which colour-shape objects are visible with their
    centre inside each visual token's region in any of its ``tpatch`` frames, and their motions
    (grounding targets of the vision tower's pretraining)."""
    grid = size // token_px
    out = np.zeros((program["frames"], grid * grid, len(PAIRS) + len(MOTIONS)), np.float32)
    for t in range(program["frames"]):
        for obj in program["objects"]:
            if not visible(obj, t):
                continue
            fx, fy = frame_centre(program, obj, t, size)
            if 0 <= fx < size and 0 <= fy < size:
                cell = int(fy // token_px) * grid + int(fx // token_px)
                out[t, cell, PAIRS.index((obj["color"], obj["shape"]))] = 1.0
                out[t, cell, len(PAIRS) + MOTIONS.index(obj["motion"])] = 1.0
    return out.reshape(program["frames"] // tpatch, tpatch, grid * grid, -1).max(1)
