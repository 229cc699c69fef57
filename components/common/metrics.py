"""Evaluation metrics and the statistics used to judge pass criteria over seeds."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def accuracy(probs_or_logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(probs_or_logits, axis=-1) == labels))


def nll(probs: np.ndarray, labels: np.ndarray, eps: float = 1e-12) -> float:
    """Mean negative log-likelihood of the true label under class probabilities."""
    return float(-np.mean(np.log(np.clip(probs[np.arange(len(labels)), labels], eps, None))))


def ece(probs: np.ndarray, labels: np.ndarray, n_bins: int = 15) -> float:
    """Expected calibration error with equal-width confidence bins (top-label)."""
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = np.clip(np.digitize(conf, edges[1:-1], right=True), 0, n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        mask = bins == b
        if mask.any():
            total += mask.mean() * abs(correct[mask].mean() - conf[mask].mean())
    return float(total)


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (rank statistic; ties get half credit)."""
    from scipy.stats import rankdata

    labels = np.asarray(labels).astype(bool)
    n_pos, n_neg = labels.sum(), (~labels).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return (centre - half, centre + half)


def bootstrap_ci(values: Sequence[float], n_boot: int = 10_000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean."""
    values = np.asarray(values, dtype=float)
    if len(values) == 1:
        return (float(values[0]), float(values[0]))
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(n_boot, len(values)), replace=True).mean(axis=1)
    alpha = (1 - level) / 2
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha)))


def summarize(values: Sequence[float]) -> dict[str, float]:
    """mean, std (ddof=1), n and a bootstrap CI of the mean, for reporting over seeds."""
    values = np.asarray(values, dtype=float)
    lo, hi = bootstrap_ci(values)
    return {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            "n": int(len(values)), "ci_low": lo, "ci_high": hi}


def paired_difference(treatment: Sequence[float], baseline: Sequence[float]) -> dict[str, float]:
    """Per-seed differences treatment - baseline, summarised (for 'method beats baseline')."""
    diff = np.asarray(treatment, dtype=float) - np.asarray(baseline, dtype=float)
    out = summarize(diff)
    out["wins"] = int((diff > 0).sum())
    return out
