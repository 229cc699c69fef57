"""pretrain_perception: clip encoder + belief head under video-level labels, then the per-frame
cache (embeddings, single-clip saliency) that the environment reads."""
from __future__ import annotations

import numpy as np
import torch

from components.anompi.data import SPLITS, labels_only, load_specs
from components.anompi.env import uniform_frames
from components.anompi.perception import (BeliefHead, ClipEncoder, belief, descriptors, encode_videos,
                                         train_perception)
from components.anompi.video import render_all
from components.anompi import paper_stages
from components.common.io import load_torch, save_torch
from components.common.seeds import seed_everything


def pretrain_perception_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:                     # the video-LLM branch (paper_stages.py)
        return paper_stages.pretrain_perception(cfg, ctx)
    seed_everything(cfg.perception.seed)
    env_dir = ctx.inputs["build_env"]
    specs = {split: load_specs(env_dir / f"{split}.parquet") for split in SPLITS}
    ctx.progress(0, 3, "rendering videos")
    desc = {split: descriptors(render_all(s, cfg.env)) for split, s in specs.items()}
    ctx.progress(1, 3, "training the clip encoder and belief head")
    enc, head, losses = train_perception(desc["train"], labels_only(specs["train"]), cfg.perception,
                                         cfg.policy, ctx=ctx)
    save_torch(ctx.out_dir / "perception.pt", {"encoder": enc.state_dict(), "head": head.state_dict(),
                                               "emb_dim": cfg.perception.emb_dim,
                                               "hidden": cfg.perception.hidden})
    ctx.progress(2, 3, "encoding every frame")
    for split in SPLITS:
        np.savez(ctx.out_dir / f"cache_{split}.npz", **encode_videos(enc, head, desc[split]))
    # sanity numbers on validation (the test split is only read by evaluate)
    cache = load_cache(ctx.out_dir, "val")
    T, y = cfg.env.n_frames, specs["val"]["label"]
    vid = torch.arange(len(y))
    metrics = {"final_loss": losses[-1]}
    for name, frames in (("dense", np.arange(T)), ("uniform32", uniform_frames(T, 32)),
                         ("scan", uniform_frames(T, cfg.policy.n_anchors))):
        obs = torch.zeros(len(y), T, dtype=torch.bool)
        obs[:, frames] = True
        metrics[f"val_acc_{name}"] = float((belief(head, cache, vid, obs).argmax(-1).numpy() == y).mean())
    ctx.write_metrics(metrics)


def load_cache(folder, split: str) -> dict[str, torch.Tensor]:
    with np.load(folder / f"cache_{split}.npz") as z:
        return {k: torch.as_tensor(z[k]) for k in z.files}


def load_head(folder) -> BeliefHead:
    state = load_torch(folder / "perception.pt")
    head = BeliefHead(state["emb_dim"], state["hidden"])
    head.load_state_dict(state["head"])
    return head.eval()


def load_encoder(folder) -> ClipEncoder:
    state = load_torch(folder / "perception.pt")
    enc = ClipEncoder(state["emb_dim"], state["hidden"])
    enc.load_state_dict(state["encoder"])
    return enc.eval()
