"""Finding concept directions: PCA of how standard fine-tuning moved the residual stream.

Both the base model and the standard-fine-tuned model read the same (ambiguous) training
prompts; at each chosen layer we take the per-token activation difference ft - base over
real tokens, centre it and keep its top principal components. These PCs are candidates for
the concepts fine-tuning picked up (the intended one, the spurious one, or neither).
"""
from __future__ import annotations

from pathlib import Path

import torch

from components.caft.cache import load_cache
from components.caft.minilm import UpperClassifier, build_upper
from components.common.io import load_torch, save_torch


@torch.no_grad()
def residuals_at(model: UpperClassifier, split: dict, layers: list[int], batch: int = 256
                 ) -> dict[int, torch.Tensor]:
    """Residual vectors of real (non-pad) tokens at each layer: {layer: [n_tokens, d]}."""
    model.eval()
    out = {layer: [] for layer in layers}
    for i in range(0, len(split["h"]), batch):
        mask = split["mask"][i:i + batch]
        res = model.residuals(split["h"][i:i + batch], mask)
        for layer in layers:
            out[layer].append(res[layer][mask])
    return {layer: torch.cat(chunks) for layer, chunks in out.items()}


def pca(x: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """Top-n principal components of the rows of x (exact SVD, in float64).
    Returns pcs [n, d] (unit rows, sign fixed so the largest |entry| is positive),
    explained-variance ratios [n] and the mean [d]."""
    x = x.double()
    mean = x.mean(0)
    _, s, vt = torch.linalg.svd(x - mean, full_matrices=False)
    pcs = vt[:n]
    signs = torch.sign(pcs.gather(1, pcs.abs().argmax(1, keepdim=True)))
    var = s**2
    return {"pcs": (pcs * signs).float(), "var_ratio": (var[:n] / var.sum()).float(), "mean": mean.float()}


def find_directions_stage(cfg, ctx) -> None:
    seed = ctx.item["seed"]
    cache = load_cache(ctx.inputs["cache_lower"])
    first, layers = cfg.model.frozen_layers, list(cfg.directions.layers)
    ft = build_upper(first, seed)
    ft.load_state_dict(load_torch(Path(ctx.inputs["pretune"][str(seed)]) / "model.pt"))
    base = build_upper(first, seed)  # head unused: only the residual stream is read
    acts_ft = residuals_at(ft, cache["train"], layers)
    acts_base = residuals_at(base, cache["train"], layers)
    directions = {}
    for layer in layers:
        directions[layer] = pca(acts_ft[layer] - acts_base[layer], cfg.directions.n_pcs)
        ctx.log_metric(f"var_ratio_top1/layer{layer}", float(directions[layer]["var_ratio"][0]))
    save_torch(ctx.out_dir / "directions.pt", directions)
    ctx.write_metrics({f"var_explained_top{cfg.directions.n_pcs}/layer{layer}":
                       float(d["var_ratio"].sum()) for layer, d in directions.items()})
