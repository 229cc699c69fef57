"""Analytic accuracy bound of a passive sampler (an ideal observer), exact over the
environment's latent distribution.

The ideal observer, given a fixed set of observed frames G, (i) sees the actor iff some frame of
G lies in the actor window, (ii) identifies falling / object_left iff some frame of G lies in
the event window, (iii) identifies running / fighting / loitering iff two consecutive frames
t, t+1 of G both lie in the event window, and otherwise answers Bayes-optimally among the
classes consistent with what it saw. Its accuracy is sum over evidence E of max_c P(c, E).
"""
from __future__ import annotations

import math

import numpy as np

from components.anompi.config import CLASSES
from components.anompi.video import MOTION_CLASSES, STATIC_CLASSES


def _latents(T: int, actor_len: tuple[int, int], event_len: tuple[int, int]):
    """Every (actor start, actor length, event start, event length) with its probability,
    matching ``video.make_specs`` (all uniform)."""
    rows, probs = [], []
    Ls = np.arange(actor_len[0], actor_len[1] + 1)
    ws = np.arange(event_len[0], event_len[1] + 1)
    for L in Ls:
        a = np.arange(0, T - L + 1)
        for w in ws:
            o = np.arange(0, L - w + 1)
            A, O = np.meshgrid(a, o, indexing="ij")
            n = A.size
            rows.append(np.stack([A.ravel(), np.full(n, L), (A + O).ravel(), np.full(n, w)], 1))
            probs.append(np.full(n, 1.0 / (len(Ls) * len(a) * len(ws) * len(o))))
    return np.concatenate(rows), np.concatenate(probs)


def hit_probabilities(T: int, frames, actor_len, event_len) -> dict[str, float]:
    g = np.zeros(T, bool)
    g[np.asarray(frames, int)] = True
    pair = np.zeros(T, bool)
    pair[1:] = g[1:] & g[:-1]                         # motion clip at t uses t-1 and t
    cg = np.concatenate([[0], np.cumsum(g)])
    cp = np.concatenate([[0], np.cumsum(pair)])
    lat, p = _latents(T, actor_len, event_len)
    a, L, e, w = lat.T
    actor = (cg[a + L] - cg[a]) > 0
    single = (cg[e + w] - cg[e]) > 0
    both = (cp[e + w] - cp[np.minimum(e + 1, T)]) > 0  # t-1 and t inside [e, e+w)
    return {"actor": _mass(p, actor), "single": _mass(p, single), "pair": _mass(p, both),
            "actor_no_single": _mass(p, actor & ~single), "actor_no_pair": _mass(p, actor & ~both)}


def _mass(p: np.ndarray, event: np.ndarray) -> float:
    """P(event), summed exactly (``math.fsum``): the same float on every machine. A BLAS dot
    product (``p @ event``, used up to v2) rounds differently with the BLAS build and its thread
    count, which moved the committed bounds in their last digits when the venv was rebuilt."""
    return math.fsum(p[event])


def passive_bound(T: int, frames, actor_len, event_len, distractor_rate: float) -> dict[str, float]:
    """Bayes accuracy of the ideal observer with uniform class priors."""
    h = hit_probabilities(T, frames, actor_len, event_len)
    pc = 1.0 / len(CLASSES)
    rho = distractor_rate
    # evidence "no actor seen": normal always wins (every other class needs a missed actor)
    e0 = pc * ((1 - rho) + rho * (1 - h["actor"]))
    # evidence "actor seen, nothing resolved": the most probable class among these
    e1 = pc * max([rho * h["actor"]] + [h["actor_no_pair"]] * len(MOTION_CLASSES)
                  + [h["actor_no_single"]] * len(STATIC_CLASSES))
    resolved = pc * (len(MOTION_CLASSES) * h["pair"] + len(STATIC_CLASSES) * h["single"])
    return {"accuracy": e0 + e1 + resolved, **h}
