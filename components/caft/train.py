"""Fine-tuning (standard and CAFT) and the hook-free evaluation of a fine-tuned model.

Standard fine-tuning and CAFT share everything (data order, head init, optimiser, steps) and
differ only in the projection hooks attached during training, so per-seed comparisons are paired.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import torch
import torch.nn.functional as F

from components.caft.ablation import ablation_hooks, has_hooks, orthonormal_basis
from components.caft.cache import load_cache
from components.caft.minilm import UpperClassifier, build_upper
from components.common.io import load_torch, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit


def epoch_batches(n: int, batch_size: int, seed: int) -> Iterator[torch.Tensor]:
    """Index batches, reshuffled every epoch with a seeded generator (endless)."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch_size):
            yield perm[i:i + batch_size]


def trim_padding(h: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop trailing all-pad positions of a batch (pure speed: padded keys are masked anyway)."""
    t = int(mask.sum(1).max())
    return h[:, :t], mask[:, :t]


def finetune(split: dict, train_cfg, first: int, seed: int, bases: dict[int, torch.Tensor],
             ctx=None, prefix: str = "train") -> UpperClassifier:
    """Fine-tune layers ``first..5`` + head on the ambiguous train split; ``bases`` (layer ->
    d x k orthonormal) are ablated during training only."""
    seed_everything(seed)
    model = build_upper(first, seed)
    n = len(split["h"])
    steps = train_cfg.epochs * math.ceil(n / train_cfg.batch_size)
    labels = split["a"]  # train is ambiguous: a == b == label

    def loss_fn(m, idx):
        h, mask = trim_padding(split["h"][idx], split["mask"][idx])
        return F.cross_entropy(m(h, mask), labels[idx])

    with ablation_hooks(model, bases):
        fit(model, epoch_batches(n, train_cfg.batch_size, seed), loss_fn, steps=steps,
            lr=train_cfg.lr, weight_decay=train_cfg.weight_decay, warmup=train_cfg.warmup,
            ctx=ctx, log_every=5, prefix=prefix)
    assert not has_hooks(model), "ablation hooks must be gone before evaluation"
    return model


@torch.no_grad()
def predict(model: UpperClassifier, split: dict, batch: int = 256) -> torch.Tensor:
    model.eval()
    preds = [model(split["h"][i:i + batch], split["mask"][i:i + batch]).argmax(-1)
             for i in range(0, len(split["h"]), batch)]
    return torch.cat(preds)


def evaluate(model: UpperClassifier, cache: dict) -> dict[str, float]:
    """ID accuracy (val), OOD accuracy on the intended concept, and the rate of following the
    spurious concept on OOD (= 1 - OOD accuracy, since B = 1 - A there). The decorrelated
    validation split only serves the premise check (does standard fine-tuning follow B?)."""
    assert not has_hooks(model)
    val_pred, ood_pred = predict(model, cache["val"]), predict(model, cache["test_ood"])
    val_ood_pred = predict(model, cache["val_ood"])
    return {
        "id_acc": float((val_pred == cache["val"]["a"]).float().mean()),
        "val_ood_intended_acc": float((val_ood_pred == cache["val_ood"]["a"]).float().mean()),
        "ood_intended_acc": float((ood_pred == cache["test_ood"]["a"]).float().mean()),
        "ood_spurious_rate": float((ood_pred == cache["test_ood"]["b"]).float().mean()),
    }


def _finish(ctx, model: UpperClassifier, metrics: dict) -> None:
    save_torch(ctx.out_dir / "model.pt", model.state_dict())
    write_json_atomic(ctx.out_dir / "eval.json", metrics)  # read by the evaluate stage
    ctx.write_metrics(metrics)


def _finish_paper(ctx, ids: dict, cfg, bases: dict[int, torch.Tensor], seed: int) -> None:
    """The paper profile's run: LoRA SFT (hooks on for CAFT), then the hook-free evaluation."""
    from components.caft.paper import train_and_evaluate

    metrics = {**ids, **train_and_evaluate(cfg, ctx, ctx.inputs["cache_lower"], bases, seed)}
    write_json_atomic(ctx.out_dir / "eval.json", metrics)
    ctx.write_metrics(metrics)


def pretune_stage(cfg, ctx) -> None:
    """Standard fine-tuning, no hooks: the baseline, and the model the directions come from."""
    seed = ctx.item["seed"]
    if cfg.paper.enabled:
        return _finish_paper(ctx, {"seed": seed}, cfg, {}, seed)
    cache = load_cache(ctx.inputs["cache_lower"])
    model = finetune(cache["train"], cfg.train, cfg.model.frozen_layers, seed, {}, ctx)
    _finish(ctx, model, {"seed": seed, **evaluate(model, cache)})


def n_directions(k_star: int, percent: int) -> int:
    """Directions kept at one point of the k sweep: the first ceil(percent % of k*)."""
    return math.ceil(k_star * percent / 100)


def variant_directions(variant: str, subspace: dict[int, torch.Tensor], percent: int,
                       seed: int, top: dict[int, torch.Tensor] | None = None) -> dict[int, torch.Tensor]:
    """layer -> directions to ablate at one point of the sweep. ``caft`` takes the first
    directions of the chosen subspace; ``random`` draws as many Gaussian directions per
    layer, so the two differ only in *which* directions are removed; ``top`` (paper profile)
    takes as many of the uninterpreted top PCs / latents."""
    gen = torch.Generator().manual_seed(10_000 * (seed + 1) + percent)
    out = {}
    for layer, directions in sorted(subspace.items()):
        k = n_directions(len(directions), percent)
        if k == 0:
            continue
        if variant == "caft":
            out[layer] = directions[:k]
        elif variant == "top" and top is not None:
            out[layer] = top[layer][:k]
        elif variant == "random":
            out[layer] = torch.randn(k, directions.shape[1], generator=gen)
        else:
            raise ValueError(f"unknown caft variant {variant!r} (caft, random; top needs top directions)")
    return out


def caft_train_stage(cfg, ctx) -> None:
    variant, percent, seed = ctx.item["variant"], ctx.item["percent"], ctx.item["seed"]
    subspace_dir = Path(ctx.inputs["concept_subspace"])
    subspace = load_torch(subspace_dir / "subspace.pt")
    top = load_torch(subspace_dir / "top.pt") if variant == "top" else None
    dirs = variant_directions(variant, subspace, percent, seed, top)
    bases = {layer: orthonormal_basis(v) for layer, v in dirs.items()}
    if cfg.paper.enabled:
        k = sum(b.shape[1] for b in bases.values())
        if k == 0:   # e.g. paper.pcs.<layer>=[] after a --to concept_subspace pass
            raise ValueError("caft_train: nothing to ablate; set paper.pcs / paper.latents to the interpreted "
                             "ids (concept_subspace/records.json shows the PCs)")
        return _finish_paper(ctx, {"seed": seed, "variant": variant, "percent": percent, "k": k}, cfg, bases, seed)
    cache = load_cache(ctx.inputs["cache_lower"])
    model = finetune(cache["train"], cfg.train, cfg.model.frozen_layers, seed, bases, ctx)
    k = sum(b.shape[1] for b in bases.values())
    _finish(ctx, model, {"seed": seed, "variant": variant, "percent": percent, "k": k,
                         **evaluate(model, cache)})
