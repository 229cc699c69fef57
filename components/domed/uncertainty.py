"""Uncertainty measures and the reliability metrics reported per (method, test domain, seed).

Every method is scored on class probabilities; ensembles on their *averaged probabilities*
(not averaged logits). Rejection/AUROC use total predictive entropy for every method, so the
comparison does not depend on which model happens to have a Dirichlet; the Dirichlet models and
the ensemble additionally report mutual information (knowledge uncertainty).
"""
from __future__ import annotations

import numpy as np
from scipy.special import digamma, softmax

from components.common import metrics


def entropy(probs: np.ndarray) -> np.ndarray:
    return -(probs * np.log(np.clip(probs, 1e-12, None))).sum(axis=-1)


def dirichlet_uncertainty(alpha: np.ndarray) -> dict[str, np.ndarray]:
    """Total, expected (aleatoric) entropy and mutual information of Dir(alpha), per row."""
    alpha0 = alpha.sum(axis=-1, keepdims=True)
    mean = alpha / alpha0
    total = entropy(mean)
    expected = -(mean * (digamma(alpha + 1.0) - digamma(alpha0 + 1.0))).sum(axis=-1)
    return {"total": total, "expected": expected, "mi": total - expected}


def ensemble_uncertainty(member_probs: np.ndarray) -> dict[str, np.ndarray]:
    """Same decomposition for an ensemble: member_probs is [M, N, C]."""
    total = entropy(member_probs.mean(axis=0))
    expected = entropy(member_probs).mean(axis=0)
    return {"total": total, "expected": expected, "mi": total - expected}


def rejection_curve(uncertainty: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """Error rate over all N samples after rejecting the k most uncertain (k = 0..N); rejected
    predictions count as corrected by an oracle."""
    order = np.argsort(-uncertainty, kind="stable")
    kept_errors = errors[order][::-1].cumsum()[::-1]          # errors among ranks k..N-1
    return np.append(kept_errors, 0.0) / len(errors)


def prediction_rejection_ratio(uncertainty: np.ndarray, errors: np.ndarray) -> float:
    """PRR = area between random and model rejection curves / same for the oracle.
    1 is a perfect ranking of errors, 0 is random, negative is worse than random."""
    errors = np.asarray(errors, dtype=float)
    n, n_err = len(errors), errors.sum()
    if n_err == 0 or n_err == n:
        return float("nan")
    k = np.arange(n + 1)
    random_curve = n_err / n * (n - k) / n
    oracle_curve = np.clip(n_err - k, 0, None) / n
    model_curve = rejection_curve(np.asarray(uncertainty, dtype=float), errors)
    return float((random_curve - model_curve).mean() / (random_curve - oracle_curve).mean())


def reliability(probs: np.ndarray, labels: np.ndarray, uncertainty: dict[str, np.ndarray],
                n_bins: int = 15) -> dict[str, float]:
    errors = (probs.argmax(axis=1) != labels).astype(float)
    out = {
        "acc": 100.0 * metrics.accuracy(probs, labels),
        "nll": metrics.nll(probs, labels),
        "ece": metrics.ece(probs, labels, n_bins=n_bins),
        "prr": prediction_rejection_ratio(uncertainty["total"], errors),
        "auroc": metrics.auroc(uncertainty["total"], errors),
    }
    if "mi" in uncertainty:
        out["prr_mi"] = prediction_rejection_ratio(uncertainty["mi"], errors)
        out["mean_mi"] = float(np.mean(uncertainty["mi"]))
    return out


def softmax_uncertainty(logits: np.ndarray) -> dict[str, np.ndarray]:
    return {"total": entropy(softmax(logits, axis=-1))}
