"""evaluate: accuracy, frames viewed and operator calls on the test split for every policy.

Policies: passive uniform (k frames on a grid, the paper-style passive baseline), passive pairs
(k/2 grid positions, each with its next frame: a stronger passive baseline that can see motion),
dense (every frame: the perception ceiling), the scripted warm-start trajectory, the warm-start
(SFT) policy, iDPO and its AEI ablations. The oracle (a dense window on the true event) uses the
event window and is analysis only, like the localisation numbers.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from components.anompi.bound import passive_bound
from components.anompi.data import load_specs
from components.anompi.env import uniform_frames
from components.anompi.perception import belief
from components.anompi.policy import run_episodes
from components.anompi.train import load_policy, make_env
from components.common.io import write_table


def pair_frames(T: int, k: int) -> np.ndarray:
    starts = uniform_frames(T, max(1, k // 2))
    return np.unique(np.clip(np.concatenate([starts, starts + 1]), 0, T - 1))


def _fixed(env, frames_per_video: np.ndarray | list) -> torch.Tensor:
    n = env.cache["emb_static"].shape[0]
    obs = torch.zeros(n, env.T, dtype=torch.bool)
    if isinstance(frames_per_video, np.ndarray) and frames_per_video.ndim == 1:
        obs[:, torch.as_tensor(frames_per_video)] = True
    else:
        for i, f in enumerate(frames_per_video):
            obs[i, torch.as_tensor(f)] = True
    return obs


def _score(env, obs: torch.Tensor, y: np.ndarray) -> tuple[float, float]:
    pred = belief(env.head, env.cache, torch.arange(len(y)), obs).argmax(-1).numpy()
    return float((pred == y).mean()), float(obs.sum(1).float().mean())


def event_overlap(obs: torch.Tensor, specs: dict) -> float:
    """Analysis only: share of videos whose observed frames include a motion clip in the event."""
    hit = []
    for i, (s, w) in enumerate(zip(specs["event_start"].tolist(), specs["event_len"].tolist())):
        hit.append(bool((obs[i, s + 1:s + w] & obs[i, s:s + w - 1]).any()))
    return float(np.mean(hit))


def evaluate_stage(cfg, ctx) -> None:
    seed = int(ctx.item["seed"])
    pdir = ctx.inputs["pretrain_perception"]
    env = make_env(pdir, cfg.policy, split="test")
    specs = load_specs(ctx.inputs["build_env"] / "test.parquet")
    y = specs["label"]
    T, e = cfg.env.n_frames, cfg.env
    rows = []

    def add(policy, acc, frames, steps=0.0, k=None, overlap=None):
        rows.append({"policy": policy, "k": -1 if k is None else int(k), "accuracy": acc,
                     "frames": frames, "steps": steps, "seed": seed,
                     "event_motion_seen": float("nan") if overlap is None else overlap})

    # learned / scripted active policies (greedy)
    vid = torch.arange(len(y))
    results = {}
    runs = {"script": (None, "script"), "sft": (ctx.inputs["sft_policy"][str(seed)], "greedy")}
    for variant in cfg.idpo.variants:
        runs[f"idpo_{variant}"] = (ctx.inputs["train_idpo"][f"{variant}-{seed}"], "greedy")
    for name, (folder, mode) in runs.items():
        policy = None if folder is None else load_policy(folder, cfg.policy.hidden)
        res = run_episodes(env, vid, policy, mode=mode, script_threshold=cfg.sft.saliency_threshold)
        acc = float((res["pred"].numpy() == y).mean())
        results[name] = res
        add(name, acc, float(res["frames"].float().mean()), float(res["steps"].float().mean()),
            overlap=event_overlap(res["obs"], specs))
    # passive baselines and the ideal-observer bound on the same grid
    for k in cfg.evaluate.passive_frames:
        acc, fr = _score(env, _fixed(env, uniform_frames(T, k)), y)
        add("passive_uniform", acc, fr, k=k)
        b = passive_bound(T, uniform_frames(T, k), e.actor_len, e.event_len, e.distractor_rate)
        add("bound_uniform", b["accuracy"], float(len(uniform_frames(T, k))), k=k)
        acc, fr = _score(env, _fixed(env, pair_frames(T, k)), y)
        add("passive_pairs", acc, fr, k=k)
    acc, fr = _score(env, _fixed(env, np.arange(T)), y)
    add("dense", acc, fr, k=T)
    oracle = [np.concatenate([uniform_frames(T, cfg.policy.n_anchors),
                              np.arange(s, min(T, s + cfg.policy.fine_len))])
              for s in specs["event_start"]]
    acc, fr = _score(env, _fixed(env, oracle), y)
    add("oracle_window", acc, fr)
    # the equal-frame passive comparison for iDPO (full): k = ceil(mean frames of iDPO)
    metrics = {}
    main = "idpo_full" if "idpo_full" in results else f"idpo_{cfg.idpo.variants[0]}"
    k_eq = int(math.ceil(float(results[main]["frames"].float().mean())))
    acc_eq, fr_eq = _score(env, _fixed(env, uniform_frames(T, k_eq)), y)
    pairs_eq, _ = _score(env, _fixed(env, pair_frames(T, k_eq)), y)
    b_eq = passive_bound(T, uniform_frames(T, k_eq), e.actor_len, e.event_len, e.distractor_rate)
    add("passive_uniform_eq", acc_eq, fr_eq, k=k_eq)
    add("passive_pairs_eq", pairs_eq, float(len(pair_frames(T, k_eq))), k=k_eq)
    add("bound_uniform_eq", b_eq["accuracy"], float(k_eq), k=k_eq)
    write_table(ctx.out_dir / "results.parquet", {c: [r[c] for r in rows] for c in rows[0]})
    for r in rows:
        if r["k"] == -1 or r["policy"].endswith("_eq") or r["policy"] == "dense":
            key = r["policy"]
            metrics[f"acc_{key}"] = r["accuracy"]
            metrics[f"frames_{key}"] = r["frames"]
            if r["k"] == -1 and not key.startswith("oracle"):
                metrics[f"steps_{key}"] = r["steps"]
    metrics["k_eq"] = k_eq
    ctx.write_metrics(metrics)
