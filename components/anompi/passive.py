"""passive_baselines: one belief head per passive sampler, trained with exactly its frames.

A passive baseline views a fixed frame set (uniform-k: a k-frame grid; pairs-k: k/2 grid
positions each with its next frame). Each gets its own belief head on the frozen clip encoder,
trained on the training split with exactly the frames it is evaluated on, so no passive arm is
judged through a head tuned for other observation patterns. The stage also measures the premise
quantities, on the validation split only:
- P1: each head's accuracy as a share of its sampler's ideal-observer bound (bound.py);
- P2: headroom for active viewing - the shared perception given the scan plus one dense window
  on the true event (analysis only) against the best passive head at the same frame count.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from components.anompi.bound import passive_bound
from components.anompi.data import labels_only, load_specs
from components.anompi.env import PASSIVE_SAMPLERS, uniform_frames
from components.anompi.perception import BeliefHead, belief
from components.anompi.pretrain import load_cache, load_head
from components.anompi import paper_stages
from components.common.io import load_torch, save_torch
from components.common.seeds import seed_everything


def head_frame_counts(cfg) -> list[int]:
    """Every k an evaluation can ask for: the equal-frame comparison (scan .. budget) and the
    accuracy-vs-frames curve."""
    return sorted(set(range(cfg.policy.n_anchors, cfg.policy.budget + 1)) | set(cfg.evaluate.passive_frames))


def fixed_embeddings(cache: dict[str, torch.Tensor], frames: np.ndarray) -> torch.Tensor:
    """(N, len(frames), d) clip embeddings of a fixed frame set (motion clip where t-1 is in it)."""
    frames = np.asarray(frames)
    motion = torch.as_tensor(np.isin(frames - 1, frames))
    idx = torch.as_tensor(frames)
    emb = torch.where(motion[None, :, None], cache["emb_motion"][:, idx], cache["emb_static"][:, idx])
    return emb.float()


def train_head(emb: torch.Tensor, y: np.ndarray, pcfg, hidden: int, seed: int) -> BeliefHead:
    """Full-batch training of a fresh belief head on one fixed observation pattern."""
    torch.manual_seed(seed)
    head = BeliefHead(emb.shape[-1], hidden)
    obs = torch.ones(emb.shape[:2], dtype=torch.bool)
    target = torch.as_tensor(y)
    opt = torch.optim.Adam(head.parameters(), lr=pcfg.lr, weight_decay=pcfg.weight_decay)
    for _ in range(pcfg.steps):
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(head(emb, obs), target).backward()
        opt.step()
    return head.eval()


@torch.no_grad()
def head_accuracy(head: BeliefHead, emb: torch.Tensor, y: np.ndarray) -> float:
    obs = torch.ones(emb.shape[:2], dtype=torch.bool)
    return float((head(emb, obs).argmax(-1).numpy() == y).mean())


def oracle_frames(T: int, n_anchors: int, fine_len: int, event_start) -> list[np.ndarray]:
    """Analysis only: the scan plus one dense window at the true event start."""
    scan = uniform_frames(T, n_anchors)
    return [np.unique(np.concatenate([scan, np.arange(s, min(T, s + fine_len))])) for s in event_start]


def oracle_accuracy(head: BeliefHead, cache, frames: list[np.ndarray], y: np.ndarray) -> tuple[float, float]:
    obs = torch.zeros(len(y), cache["emb_static"].shape[1], dtype=torch.bool)
    for i, f in enumerate(frames):
        obs[i, torch.as_tensor(f)] = True
    pred = belief(head, cache, torch.arange(len(y)), obs).argmax(-1).numpy()
    return float((pred == y).mean()), float(obs.sum(1).float().mean())


def passive_baselines_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:                     # the video-LLM branch (paper_stages.py)
        return paper_stages.passive_baselines(cfg, ctx)
    seed_everything(cfg.passive.seed)
    env_dir, pdir = ctx.inputs["build_env"], ctx.inputs["pretrain_perception"]
    y_train = labels_only(load_specs(env_dir / "train.parquet"))
    val = load_specs(env_dir / "val.parquet")
    cache_train, cache_val = load_cache(pdir, "train"), load_cache(pdir, "val")
    hidden = load_torch(pdir / "perception.pt")["hidden"]
    T, e = cfg.env.n_frames, cfg.env
    heads, metrics, ratios = {}, {}, {kind: [] for kind in PASSIVE_SAMPLERS}
    counts = head_frame_counts(cfg)
    for i, k in enumerate(counts):
        for kind, sampler in PASSIVE_SAMPLERS.items():
            frames = sampler(T, k)
            head = train_head(fixed_embeddings(cache_train, frames), y_train, cfg.passive, hidden,
                              seed=cfg.passive.seed)
            acc = head_accuracy(head, fixed_embeddings(cache_val, frames), val["label"])
            bound = passive_bound(T, frames, e.actor_len, e.event_len, e.distractor_rate)["accuracy"]
            heads[f"{kind}_{k}"] = head.state_dict()
            metrics.update({f"val_acc_{kind}_{k}": acc, f"bound_{kind}_{k}": bound,
                            f"ratio_{kind}_{k}": acc / bound})
            ratios[kind].append(acc / bound)
        ctx.progress(i + 1, len(counts), f"passive heads k = {k}")
    save_torch(ctx.out_dir / "heads.pt", {"hidden": hidden, "heads": heads})
    for kind, r in ratios.items():
        metrics[f"min_ratio_{kind}"] = float(min(r))
    metrics["min_ratio_to_bound"] = float(min(min(r) for r in ratios.values()))
    # P2: what an active viewer could gain at equal frames with the shared perception
    shared = load_head(pdir)
    oracle = oracle_frames(T, cfg.policy.n_anchors, cfg.policy.fine_len, val["event_start"])
    acc_o, frames_o = oracle_accuracy(shared, cache_val, oracle, val["label"])
    k_o = int(np.ceil(frames_o))
    best_passive = max(head_accuracy(load_passive_head(heads, hidden, kind, k_o),
                                     fixed_embeddings(cache_val, PASSIVE_SAMPLERS[kind](T, k_o)),
                                     val["label"]) for kind in PASSIVE_SAMPLERS)
    metrics.update({"val_acc_oracle_window": acc_o, "frames_oracle_window": frames_o,
                    "val_acc_best_passive_at_oracle_frames": best_passive,
                    "oracle_headroom": acc_o - best_passive})
    ctx.write_metrics(metrics)


def load_passive_head(heads: dict, hidden: int, kind: str, k: int) -> BeliefHead:
    key = f"{kind}_{k}"
    if key not in heads:
        raise KeyError(f"no passive head {key!r}: passive_baselines trains k in {sorted(heads)}")
    state = heads[key]
    head = BeliefHead((state["net.0.weight"].shape[1] - 1) // 2, hidden)
    head.load_state_dict(state)
    return head.eval()


def load_passive_heads(folder) -> tuple[dict, int]:
    blob = load_torch(folder / "heads.pt")
    return blob["heads"], blob["hidden"]
