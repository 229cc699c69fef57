"""Stage 1 alignment, the reference model, and the three stage-2 arms at one budget.

Every arm is the shared loop ``components.common.train.fit`` with a per-token weight (1 = the
token is supervised, 0 = label -100); the arms differ only in which samples / tokens carry weight.
"""
from __future__ import annotations

import numpy as np
import torch

from components.common.io import load_torch, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit
from components.vig import llava
from components.vig.data import VOCAB
from components.vig.model import build_model, weighted_lm_loss


def load_split(data_dir, name: str) -> dict:
    return load_torch(data_dir / f"{name}.pt")


def kinds_of(data_dir) -> np.ndarray:
    from components.common.io import read_table

    return np.asarray(read_table(data_dir / "train_samples.parquet").column("kind").to_pylist())


def new_model(cfg, seed: int = 0) -> torch.nn.Module:
    return build_model(cfg.model, len(VOCAB), cfg.data.image_size, seed=seed)


def batch_stream(split: dict, weights: torch.Tensor, batch_size: int, seed: int):
    """Endless random batches (images, tokens, weights) over the samples that carry any weight."""
    pool = torch.nonzero(weights.sum(1) > 0).squeeze(1)
    gen = torch.Generator().manual_seed(seed)
    while True:
        idx = pool[torch.randint(len(pool), (batch_size,), generator=gen)]
        yield split["images"][idx], split["tokens"][idx], weights[idx]


def train_weighted(cfg, ctx, model, split, weights, section, seed: int, prefix: str) -> dict:
    torch.set_num_threads(1)
    records = fit(model, batch_stream(split, weights, section.batch_size, seed),
                  lambda m, b: weighted_lm_loss(m, *b), steps=section.steps, lr=section.lr,
                  warmup=max(1, section.steps // 20), ctx=ctx, prefix=prefix,
                  log_every=max(1, section.steps // 20))
    return {"final_loss": records[-1][f"{prefix}/loss"]}


def answer_weights(split: dict) -> torch.Tensor:
    """Vanilla supervision: every answer token (and <eos>), aligned with the shifted targets."""
    return split["supervised"][:, 1:].float()


def align_stage1_stage(cfg, ctx) -> None:
    """Captions of an unnamed object (LLaVA's stage-1 role): teaches the vision tower and the
    projector what the image shows, before the instruction data with its noun prior."""
    if llava.is_paper(cfg):
        return llava.checkpoint_stage(cfg, ctx, "stage-1 aligned start of every arm")
    data_dir = ctx.inputs["prepare_data"]
    split = load_split(data_dir, "align")
    seed_everything(cfg.align.seed)
    model = new_model(cfg, cfg.align.seed)
    weights = answer_weights(split)
    out = train_weighted(cfg, ctx, model, split, weights, cfg.align, cfg.align.seed, "align")
    save_torch(ctx.out_dir / "model.pt", model.state_dict())
    ctx.write_metrics(out)


def train_reference_stage(cfg, ctx) -> None:
    """One vanilla stage-2 run whose VIG scores are cached and shared by all arms."""
    if llava.is_paper(cfg):
        return llava.checkpoint_stage(cfg, ctx, "VIG scorer")
    data_dir = ctx.inputs["prepare_data"]
    split = load_split(data_dir, "train")
    seed_everything(cfg.reference.seed)
    model = new_model(cfg, cfg.reference.seed)
    model.load_state_dict(load_torch(ctx.inputs["align_stage1"] / "model.pt"))
    out = train_weighted(cfg, ctx, model, split, answer_weights(split), cfg.reference,
                         cfg.reference.seed, "reference")
    save_torch(ctx.out_dir / "model.pt", model.state_dict())
    ctx.write_metrics(out)


def random_matched_weights(split: dict, kinds: np.ndarray, vig_weights: torch.Tensor,
                           seed: int) -> torch.Tensor:
    """The VIG arm's control with its choices made at random: as many multimodal samples and as
    many supervised multimodal answer tokens as the VIG selection, drawn uniformly (a random
    subset of samples, then random answer tokens inside it); text-only samples keep every token."""
    answer = answer_weights(split)
    multimodal = kinds != "text"
    mm_rows = torch.from_numpy(multimodal)
    n_samples = int((vig_weights[mm_rows].sum(1) > 0).sum())
    n_tokens = int(vig_weights[mm_rows].sum())
    rng = np.random.default_rng(seed)
    keep = np.zeros(len(kinds), dtype=bool)
    keep[rng.choice(np.flatnonzero(multimodal), size=n_samples, replace=False)] = True
    rows, cols = torch.nonzero(answer * torch.from_numpy(keep)[:, None].float(), as_tuple=True)
    # one token per kept sample first, so every kept sample carries weight (as in the VIG arm)
    first = np.unique(rows.numpy(), return_index=True)[1]
    rest = np.setdiff1d(np.arange(len(rows)), first)
    extra = rng.choice(rest, size=min(len(rest), max(0, n_tokens - len(first))), replace=False)
    chosen = np.concatenate([first, extra])
    weights = torch.zeros_like(answer)
    weights[rows[chosen], cols[chosen]] = 1.0
    weights[~mm_rows] = answer[~mm_rows]
    return weights


def arm_weights(variant: str, split, kinds, selection_dir, seed: int):
    if variant == "vanilla":
        return answer_weights(split)
    vig_weights = load_torch(selection_dir / "selection.pt")["weights"]
    if variant == "random":
        return random_matched_weights(split, kinds, vig_weights, seed)
    if variant == "vig":
        return vig_weights
    raise ValueError(f"unknown variant {variant!r} (vanilla, random, vig)")


def train_arm_stage(cfg, ctx) -> None:
    """Stage-2 instruction tuning from the stage-1 checkpoint, same steps and batch for every arm."""
    variant, seed = ctx.item["variant"], ctx.item["seed"]
    data_dir = ctx.inputs["prepare_data"]
    split, kinds = load_split(data_dir, "train"), kinds_of(data_dir)
    weights = arm_weights(variant, split, kinds, ctx.inputs["select"], seed)
    if llava.is_paper(cfg):
        out = llava.train_arm_stage(cfg, ctx, weights)          # LoRA on LLaVA-1.5, same weights
    else:
        seed_everything(seed)
        model = new_model(cfg, seed)
        model.load_state_dict(load_torch(ctx.inputs["align_stage1"] / "model.pt"))
        out = train_weighted(cfg, ctx, model, split, weights, cfg.train, seed, "train")
        save_torch(ctx.out_dir / "model.pt", model.state_dict())
    mm = torch.from_numpy(kinds != "text")
    out.update(supervised_tokens=float(weights.sum()),
               supervised_multimodal_tokens=float(weights[mm].sum()),
               supervised_samples=int((weights.sum(1) > 0).sum()),
               multimodal_samples=int((weights[mm].sum(1) > 0).sum()))
    write_json_atomic(ctx.out_dir / "counts.json", out)   # read by evaluate
    ctx.write_metrics(out)
