"""Automated interpretation of the PCs on the neutral probe set (never the OOD test set).

For each PC we project the base model's mean-pooled residual of every probe sentence onto it
and correlate that score with each concept's label (point-biserial r = Pearson r with a 0/1
label), each on the probe sentences that carry only that concept. A PC is kept as "spurious
concept" when it tracks B strongly and A at most half as much. The max- and min-projecting probe
sentences of every PC are saved so a human can check the automatic call.
"""
from __future__ import annotations

import numpy as np
import torch

from components.caft.cache import load_cache
from components.caft.minilm import build_upper
from components.common.minilm import mean_pool
from components.common.io import load_torch, write_json_atomic
from pathlib import Path


def point_biserial(scores: np.ndarray, labels: np.ndarray) -> float:
    if scores.std() == 0 or labels.std() == 0:
        return 0.0
    return float(np.corrcoef(scores, labels)[0, 1])


@torch.no_grad()
def probe_scores(probe: dict, directions: dict, first: int, seed: int) -> dict[int, np.ndarray]:
    """{layer: [n_probe, n_pcs]} projections of base-model sentence vectors onto the PCs."""
    base = build_upper(first, seed).eval()
    res = base.residuals(probe["h"], probe["mask"])
    return {layer: (mean_pool(res[layer], probe["mask"]) @ d["pcs"].T).numpy()
            for layer, d in directions.items()}


def select(scores: dict[int, np.ndarray], a: np.ndarray, b: np.ndarray, rule) -> tuple[dict, list]:
    """Apply the fixed rule; returns ({layer: [pc indices]}, per-PC records)."""
    on_a, on_b = a >= 0, b >= 0
    selected, records = {}, []
    for layer, s in scores.items():
        keep = []
        for j in range(s.shape[1]):
            r_a = point_biserial(s[on_a, j], a[on_a])
            r_b = point_biserial(s[on_b, j], b[on_b])
            chosen = (abs(r_b) >= rule.min_abs_corr_spurious
                      and abs(r_a) <= rule.max_intended_ratio * abs(r_b))
            records.append({"layer": layer, "pc": j, "r_intended": r_a, "r_spurious": r_b,
                            "selected": chosen})
            if chosen:
                keep.append(j)
        selected[str(layer)] = keep
    return selected, records


def displays(scores: dict[int, np.ndarray], texts: list[str], n: int) -> dict:
    """Top/bottom-n probe sentences along each PC, for a human to read."""
    out = {}
    for layer, s in scores.items():
        for j in range(s.shape[1]):
            order = np.argsort(s[:, j])
            out[f"layer{layer}/pc{j}"] = {"max": [texts[i] for i in order[::-1][:n]],
                                          "min": [texts[i] for i in order[:n]]}
    return out


def interpret_stage(cfg, ctx) -> None:
    seed = ctx.item["seed"]
    probe = load_cache(ctx.inputs["cache_lower"])["probe"]  # only the probe split is read
    directions = load_torch(Path(ctx.inputs["find_directions"][str(seed)]) / "directions.pt")
    scores = probe_scores(probe, directions, cfg.model.frozen_layers, seed)
    selected, records = select(scores, probe["a"].numpy(), probe["b"].numpy(), cfg.select)
    write_json_atomic(ctx.out_dir / "selected.json", selected)
    write_json_atomic(ctx.out_dir / "pc_scores.json", records)
    write_json_atomic(ctx.out_dir / "displays.json", displays(scores, probe["text"], cfg.select.n_display))
    ctx.write_metrics({"k_selected": sum(len(v) for v in selected.values()),
                       **{f"k_selected/layer{layer}": len(v) for layer, v in selected.items()}})
