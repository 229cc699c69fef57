"""Choosing the ablated concept subspace on the probe set (the task and OOD splits are never read).

At every hooked layer, from the cached frozen output upwards, the subspace grows one direction
at a time by iterative nullspace projection (Ravfogel et al., 2020): fit a logistic probe for
the spurious concept B on the fit part of the probe set, add its weight vector (orthogonalised
against the directions so far), remove the subspace, fit again; stop as soon as the probe reads
B on the held-out part no better than ``target_acc``. Each layer sees the base model's residual
stream with the lower layers' subspaces already removed, as the training hooks will.

Features are mean-pooled residuals of each sentence: removing span(Q) from every token removes
it from the pooled vector too, because both maps are linear.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from components.caft.ablation import project_out
from components.caft.cache import load_cache
from components.caft.minilm import UpperClassifier, build_upper
from components.common.io import save_torch, write_json_atomic
from components.common.minilm import mean_pool


def fit_probe(x: np.ndarray, y: np.ndarray, c: float) -> LogisticRegression:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a weak probe is still a probe
        return LogisticRegression(C=c, max_iter=1000).fit(x, y)


def heldout_accuracy(x: np.ndarray, y: np.ndarray, fit: np.ndarray, cs: list[float]) -> float:
    """Best held-out accuracy over probes of several strengths (fitted on ``fit``, scored on the
    rest): how decodable the concept still is."""
    return max(float(fit_probe(x[fit], y[fit], c).score(x[~fit], y[~fit])) for c in cs)


def remove(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    return x - (x @ q) @ q.T


def grow_subspace(x: np.ndarray, y: np.ndarray, fit: np.ndarray, c: float, target_acc: float,
                  max_k: int) -> tuple[np.ndarray, list[float]]:
    """Orthonormal Q (d x k), the fewest INLP directions after which the held-out probe is at
    most ``target_acc``, and the held-out accuracy before each added direction (plus the final)."""
    q = np.zeros((x.shape[1], 0))
    path = []
    while True:
        xp = remove(x, q)
        probe = fit_probe(xp[fit], y[fit], c)
        path.append(float(probe.score(xp[~fit], y[~fit])))
        if path[-1] <= target_acc or q.shape[1] >= max_k:
            return q, path
        w = probe.coef_[0]
        w = w - q @ (q.T @ w)
        q = np.c_[q, w / np.linalg.norm(w)]


def _pooled(h: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    return mean_pool(h, mask).double().numpy()


@torch.no_grad()
def choose_subspaces(model: UpperClassifier, probe: dict, layers: list[int], rule) -> dict[int, dict]:
    """{layer: record} with the directions (k x d, in the order found) and the decodability of
    both concepts on held-out probes before and after removing them."""
    model.eval()
    a, b = probe["a"].numpy(), probe["b"].numpy()
    fit = ~probe["heldout"].numpy().astype(bool)
    on_a, on_b = a >= 0, b >= 0
    h, mask = probe["h"], probe["mask"]
    stream = [(model.first - 1, None)] + list(zip(model.layer_ids, model.blocks))
    records = {}
    for layer, block in stream:
        if block is not None:
            h = block(h, mask)
        if layer not in layers:
            continue
        x = _pooled(h, mask)
        q, path = grow_subspace(x[on_b], b[on_b], fit[on_b], rule.probe_c, rule.target_acc, rule.max_k)
        after = remove(x, q)
        records[layer] = {
            "directions": torch.tensor(q.T, dtype=torch.float32),
            "k": q.shape[1], "spurious_path": path,
            "spurious_before": heldout_accuracy(x[on_b], b[on_b], fit[on_b], rule.check_cs),
            "spurious_after": heldout_accuracy(after[on_b], b[on_b], fit[on_b], rule.check_cs),
            "intended_before": heldout_accuracy(x[on_a], a[on_a], fit[on_a], rule.check_cs),
            "intended_after": heldout_accuracy(after[on_a], a[on_a], fit[on_a], rule.check_cs),
        }
        h = project_out(h, records[layer]["directions"].T)
    return records


def subspace_metrics(records: dict[int, dict]) -> dict[str, float]:
    """Per-layer k and decodability, and the two premise numbers (worst layer)."""
    out = {"k_total": sum(r["k"] for r in records.values()),
           "max_spurious_heldout_acc": max(r["spurious_after"] for r in records.values()),
           "min_intended_heldout_acc": min(r["intended_after"] for r in records.values())}
    for layer, r in records.items():
        out[f"k/layer{layer}"] = r["k"]
        for key in ("spurious_before", "spurious_after", "intended_before", "intended_after"):
            out[f"{key}/layer{layer}"] = r[key]
    return out


def concept_subspace_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:  # interpreted SAE latents or PCs (paper_directions.py)
        return paper_subspace_stage(cfg, ctx)
    probe = load_cache(ctx.inputs["cache_lower"])["probe"]  # only the probe split is read
    model = build_upper(cfg.model.frozen_layers, seed=0)    # the base model; the head is unused
    records = choose_subspaces(model, probe, list(cfg.subspace.layers), cfg.subspace)
    save_torch(ctx.out_dir / "subspace.pt", {layer: r["directions"] for layer, r in records.items()})
    write_json_atomic(ctx.out_dir / "records.json",
                      {str(layer): {k: v for k, v in r.items() if k != "directions"}
                       for layer, r in records.items()})
    ctx.write_metrics(subspace_metrics(records))


def paper_subspace_stage(cfg, ctx) -> None:
    """The paper profile's subspace: the interpreted directions (``subspace.pt``), the
    uninterpreted ``top`` ones (``top.pt``) when that variant runs, and what was read."""
    from components.caft.paper import load_inputs
    from components.caft.paper_directions import needs_activations, paper_subspace

    run_dir = Path(ctx.inputs["pretune"][str(cfg.seeds[0])]) if needs_activations(cfg) else None
    sft = load_inputs(ctx.inputs["cache_lower"])["sft"]
    directions, top, metrics, records = paper_subspace(cfg, sft, run_dir)
    save_torch(ctx.out_dir / "subspace.pt", directions)
    save_torch(ctx.out_dir / "top.pt", top)
    write_json_atomic(ctx.out_dir / "records.json", records)
    ctx.write_metrics(metrics)
