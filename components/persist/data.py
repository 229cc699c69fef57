"""Stages gen_worlds and rollout_env: procedural voxel worlds and agent rollouts with
frames, depth, class maps, cameras and agent-centred voxel crops from the ray caster."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from components.common.io import load_npz, save_npz, write_json_atomic, write_table
from components.common.seeds import seed_everything
from components.persist.config import check_backend
from components.persist.raycast import render_views
from components.persist.world import (BACK, BREAK, FORWARD, LANDMARKS, LEFT, NOOP, PITCH_DOWN,
                                      PITCH_UP, PLACE, RIGHT, YAW_LEFT, YAW_RIGHT, Agent, EnvSpec,
                                      camera_vector, crop_origin, extract_crop, generate_world,
                                      place_pillar, spawn, step_agent)

POLICIES = ("free", "lookaround", "orbit")


def env_spec(world) -> EnvSpec:
    return EnvSpec(size=world.size, height=world.height, crop=world.crop, stride=world.stride,
                   fov_deg=world.fov_deg, yaw_step_deg=world.yaw_step_deg)


def spin_steps(world) -> int:
    """Yaw actions in one full turn."""
    return int(round(360 / world.yaw_step_deg))


# ---------------------------------------------------------------------------------- worlds
def gen_worlds_stage(cfg, ctx) -> None:
    w = cfg.world
    check_backend(w)          # preflight says it first; a stage called directly says the same line
    spec = env_spec(w)
    n_tot = w.n_train_worlds + w.n_eval_worlds + w.n_val_worlds
    worlds = np.stack([generate_world(spec, w.world_seed + i, w.n_trees, w.n_pillars, w.water)
                       for i in range(n_tot)])
    uniform = generate_world(spec, 0, 0, 0, uniform=True)[None]
    n_tr, n_ev = w.n_train_worlds, w.n_eval_worlds
    save_npz(ctx.out_dir / "worlds.npz", train=worlds[:n_tr], eval=worlds[n_tr:n_tr + n_ev],
             val=worlds[n_tr + n_ev:], uniform=uniform)
    counts = np.bincount(worlds.ravel(), minlength=11) / worlds.size
    ctx.write_metrics({"n_train_worlds": w.n_train_worlds, "n_eval_worlds": w.n_eval_worlds,
                       "landmark_fraction": float(counts[8:].sum()),
                       "solid_fraction": float(1 - counts[0])})


# ---------------------------------------------------------------------------------- policies
def policy_actions(kind: str, steps: int, rng: np.random.Generator, spin_steps: int = 24) -> list[int]:
    """Open-loop action sequences for the behaviour policies."""
    if kind == "free":
        choices = [FORWARD, FORWARD, FORWARD, BACK, LEFT, RIGHT, YAW_LEFT, YAW_LEFT, YAW_RIGHT,
                   YAW_RIGHT, PITCH_UP, PITCH_DOWN, NOOP, PLACE, BREAK]
        out: list[int] = []
        while len(out) < steps:
            a = int(rng.choice(choices))
            out += [a] * (1 if a in (PLACE, BREAK) else int(rng.integers(1, 5)))
        return out[:steps]
    if kind == "lookaround":
        # full spins in place (24 x 15 deg), sometimes tilting the view between spins
        turn = YAW_LEFT if rng.random() < 0.5 else YAW_RIGHT
        out = []
        while len(out) < steps:
            out += [turn] * spin_steps
            if rng.random() < 0.3:
                out += [PITCH_UP if rng.random() < 0.5 else PITCH_DOWN]
        return out[:steps]
    if kind == "orbit":
        # strafe while turning the other way: circles a point in front of the agent
        strafe, turn = (RIGHT, YAW_LEFT) if rng.random() < 0.5 else (LEFT, YAW_RIGHT)
        return [strafe if i % 2 == 0 else turn for i in range(steps)]
    if kind == "spin_eval":
        return [YAW_LEFT] * steps
    raise ValueError(f"unknown policy {kind!r}")


def run_episode(vox: np.ndarray, spec: EnvSpec, actions: list[int], hw: tuple[int, int],
                rng: np.random.Generator, agent: Agent | None = None) -> dict[str, np.ndarray]:
    """Roll out open-loop ``actions``; observation t follows action t (action 0 is a noop)."""
    vox = vox.copy()
    agent = spawn(vox, spec, rng) if agent is None else agent.copy()
    agents, crops, origins, cams = [], [], [], []
    frames: list[dict] = []
    pending: list = []

    def flush():
        if pending:
            frames.append(render_views(vox, pending, spec, hw))
            pending.clear()

    def observe():
        origin = crop_origin(agent, spec)
        agents.append(agent.copy())
        pending.append(agent.copy())
        origins.append(origin)
        crops.append(extract_crop(vox, origin, spec))
        cams.append(camera_vector(agent, origin, spec))

    observe()
    for a in actions:
        if a in (PLACE, BREAK):
            flush()  # the world is about to change: render what came before with the old one
        step_agent(vox, spec, agent, a)
        observe()
    flush()
    views = {k: np.concatenate([f[k] for f in frames]) for k in frames[0]}
    return {
        "frames": np.round(views["rgb"] * 255).astype(np.uint8),
        "cls": views["cls"],
        "depth": views["depth"].astype(np.float16),
        "cells": views["cell"].astype(np.int16),
        "cams": np.stack(cams),
        "origins": np.stack(origins).astype(np.int16),
        "actions": np.array([NOOP] + list(actions), dtype=np.int8),
        "crops": np.stack(crops),
        "yaw_pitch": np.array([[g.yaw, g.pitch] for g in agents], dtype=np.float32),
    }


# ---------------------------------------------------------------------------------- memory probe
MIN_PROBE_PIXELS = 6     # the probe must cover at least this many pixels of o_0


def probe_episode(vox: np.ndarray, spec: EnvSpec, actions: list[int], hw: tuple[int, int],
                  rng: np.random.Generator, distance: float, width: int, height: int) -> dict:
    """A spin episode with a landmark pillar of random colour placed in view at spawn.

    Adds ``probe_colour`` (class), ``probe_cells`` (width^2 * height, 3) world voxels (-1 pad)
    and ``probe_mask`` (T, H, W): pixels whose first hit is a probe voxel. The colour is drawn
    uniformly from the landmark classes, so a model that ignores it scores 1/3."""
    for _ in range(50):
        agent = spawn(vox, spec, rng)
        colour = LANDMARKS[int(rng.integers(len(LANDMARKS)))]
        centre = agent.pos[:2] + distance * np.array([np.cos(agent.yaw), np.sin(agent.yaw)])
        world = vox.copy()
        cells = place_pillar(world, centre, width, height, colour, avoid=agent.pos)
        if cells is None:
            continue
        first = render_views(world, [agent], spec, hw)
        if _probe_mask(first["cell"], cells).sum() >= MIN_PROBE_PIXELS:
            break
    else:
        raise RuntimeError("no spawn pose sees the probe")
    ep = run_episode(world, spec, actions, hw, rng, agent=agent)
    padded = np.full((width * width * height, 3), -1, dtype=np.int16)
    padded[:len(cells)] = cells
    ep.update(probe_colour=np.int16(colour), probe_cells=padded,
              probe_mask=_probe_mask(ep["cells"], cells))
    return ep


def _probe_mask(cell_maps: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """(..., H, W) bool: the first hit of the pixel is one of ``cells``."""
    hits = np.zeros(cell_maps.shape[:-1], dtype=bool)
    for c in np.asarray(cells):
        hits |= (cell_maps == c).all(-1)
    return hits


def probe_set(worlds: np.ndarray, spec: EnvSpec, n: int, steps: int, hw: tuple[int, int],
              rng: np.random.Generator, r) -> dict[str, np.ndarray]:
    eps = [probe_episode(worlds[i % len(worlds)], spec, policy_actions("spin_eval", steps, rng), hw,
                         rng, r.probe_distance, r.probe_width, r.probe_height) for i in range(n)]
    out = {k: np.stack([e[k] for e in eps]) for k in eps[0]}
    out["world"] = np.array([i % len(worlds) for i in range(n)], dtype=np.int16)
    return out


def rollout_set(worlds: np.ndarray, spec: EnvSpec, plan: list[tuple[int, str, int]],
                hw: tuple[int, int], rng: np.random.Generator, ctx=None, keep_cells: bool = False,
                spin: int = 24, near_pillar=None) -> dict[str, np.ndarray]:
    """``plan`` = [(world index, policy, steps)]; every episode of a set has the same length.
    ``near_pillar`` (``frac``, ``distance``): that fraction of episodes starts with a 1x1x3 pillar
    of a random landmark colour stood ``distance`` voxels in front of the spawn, in view (as in
    the memory probe, whose colour is drawn independently at evaluation)."""
    eps = []
    for i, (w, kind, steps) in enumerate(plan):
        actions = policy_actions(kind, steps, rng, spin)
        if near_pillar is not None and rng.random() < near_pillar.frac:
            ep = probe_episode(worlds[w], spec, actions, hw, rng, near_pillar.distance, 1, 3)
            for key in ("probe_colour", "probe_cells", "probe_mask"):
                ep.pop(key)
        else:
            ep = run_episode(worlds[w], spec, actions, hw, rng)
        if not keep_cells:
            ep.pop("cells")
        eps.append(ep)
        if ctx is not None and (i + 1) % 10 == 0:
            ctx.progress(i + 1, len(plan), "episodes")
    out = {k: np.stack([e[k] for e in eps]) for k in eps[0]}
    out["world"] = np.array([p[0] for p in plan], dtype=np.int16)
    out["policy"] = np.array([p[1] for p in plan])
    return out


def rollout_env_stage(cfg, ctx) -> None:
    w, r = cfg.world, cfg.rollout
    spec = env_spec(w)
    hw = (w.frame, w.frame)
    worlds = load_npz(ctx.inputs["gen_worlds"] / "worlds.npz")
    rng = seed_everything(r.seed)
    kinds, probs = zip(*r.policy_mix.items())
    probs = np.array(probs) / sum(probs)
    plan = [(wi, str(rng.choice(kinds, p=probs)), r.steps)
            for wi in range(len(worlds["train"])) for _ in range(r.episodes_per_world)]
    spin = spin_steps(w)
    near = SimpleNamespace(frac=r.train_near_pillar_frac, distance=r.probe_distance) \
        if r.train_near_pillar_frac > 0 else None
    train = rollout_set(worlds["train"], spec, plan, hw, rng, ctx, spin=spin, near_pillar=near)
    save_npz(ctx.out_dir / "train.npz", **train)
    n_eval = len(worlds["eval"])
    probe = probe_set(worlds["eval"], spec, r.eval_probe_episodes, spin, hw, rng, r)
    probe_val = probe_set(worlds["val"], spec, r.val_probe_episodes, spin, hw, rng, r)
    free = rollout_set(worlds["eval"], spec,
                       [(i % n_eval, "free", r.eval_free_steps) for i in range(r.eval_free_episodes)],
                       hw, rng, keep_cells=True)
    uniform = rollout_set(worlds["uniform"], spec, [(0, "spin_eval", spin)] * r.eval_uniform_episodes,
                          hw, rng, keep_cells=True, spin=spin)
    save_npz(ctx.out_dir / "eval_probe.npz", **probe)
    save_npz(ctx.out_dir / "val_probe.npz", **probe_val)
    save_npz(ctx.out_dir / "eval_free.npz", **free)
    save_npz(ctx.out_dir / "eval_uniform.npz", **uniform)
    write_table(ctx.out_dir / "episodes.parquet", {
        "split": ["train"] * len(plan), "world": [p[0] for p in plan],
        "policy": [p[1] for p in plan], "steps": [p[2] for p in plan]})
    # the spin returns exactly to the start pose: a check on the env, not on a model
    ret = float(np.abs(probe["cams"][:, spin] - probe["cams"][:, 0]).max())
    write_json_atomic(ctx.out_dir / "summary.json", {"spin_return_cam_err": ret})
    ctx.write_metrics({
        "n_train_episodes": len(plan), "n_train_frames": int(train["frames"].shape[0] * train["frames"].shape[1]),
        "spin_return_cam_err": ret,
        "sky_fraction": float((train["cls"] == 0).mean()),
        "landmark_pixel_fraction": float((train["cls"] >= 8).mean()),
        "crop_shifts_per_episode": float((np.abs(np.diff(train["origins"], axis=1)).sum(-1) > 0).sum(1).mean()),
        "probe_pixels_t0": float(probe["probe_mask"][:, 0].sum((1, 2)).mean()),
        "val_probe_pixels_t0": float(probe_val["probe_mask"][:, 0].sum((1, 2)).mean()),
    })
