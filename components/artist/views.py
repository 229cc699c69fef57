"""The view builder: what the reasoner and controller may see of a series.

A view is one window ``[start, end)`` of the series resampled to ``budget`` points by exact area
averaging (each output point is the mean of the series over its share of the window; windows
shorter than the budget are repeated piecewise-constantly). View 0 is the coarse full-series
view (what a static model gets); views 1..A are the candidate windows of the action grid:
``n_fine`` windows of length/n_fine, then ``n_quarters`` windows of length/n_quarters. Action A
is STOP (the controller's ACCEPT).

Every view is normalised with the mean and std of the coarse view, never with statistics of the
full-resolution series, so a zoomed view depends only on the samples inside its window and on
the coarse view. tests/artist checks this: changing samples outside the chosen windows in a way
that keeps the coarse view leaves every input of the model unchanged.
"""
from __future__ import annotations

import numpy as np


def action_windows(length: int, n_fine: int, n_quarters: int) -> np.ndarray:
    """``(A, 2)`` integer windows ``[start, end)`` of the action grid for a series of ``length``."""
    wins = []
    for parts in (n_fine, n_quarters):
        edges = np.round(np.linspace(0, length, parts + 1)).astype(int)
        wins += [(int(edges[i]), int(max(edges[i + 1], edges[i] + 1))) for i in range(parts)]
    return np.asarray(wins, dtype=np.int64)


def window_geometry(n_fine: int, n_quarters: int) -> np.ndarray:
    """``(1 + A, 3)`` relative (start, end, width) of the coarse view and each candidate window."""
    rel = action_windows(n_fine * n_quarters * 4, n_fine, n_quarters) / (n_fine * n_quarters * 4)
    rows = [(0.0, 1.0, 1.0)] + [(s, e, e - s) for s, e in rel]
    return np.asarray(rows, dtype=np.float32)


def area_resample(segment: np.ndarray, budget: int) -> np.ndarray:
    """Mean of the piecewise-constant signal over ``budget`` equal sub-intervals of the segment."""
    segment = np.asarray(segment, dtype=np.float64)
    n = len(segment)
    cum = np.concatenate([[0.0], np.cumsum(segment)])          # integral at integer points
    edges = np.linspace(0.0, n, budget + 1)
    integral = np.interp(edges, np.arange(n + 1), cum)          # exact for piecewise constant
    return ((integral[1:] - integral[:-1]) / (n / budget)).astype(np.float32)


def coarse_view(series: np.ndarray, budget: int) -> np.ndarray:
    return area_resample(series, budget)


def build_views(series: np.ndarray, length: int, budget: int, n_fine: int, n_quarters: int) -> np.ndarray:
    """``(1 + A, budget)`` normalised views of one series: coarse first, then every window."""
    x = np.asarray(series[:length], dtype=np.float64)
    coarse = coarse_view(x, budget)
    mu, sd = float(coarse.mean()), float(coarse.std()) + 1e-3
    views = [coarse] + [area_resample(x[s:e], budget) for s, e in action_windows(length, n_fine, n_quarters)]
    return ((np.stack(views) - mu) / sd).astype(np.float32)


def batch_area_resample(x: np.ndarray, start: int, end: int, budget: int) -> np.ndarray:
    """``area_resample(row[start:end], budget)`` for every row of ``x`` at once."""
    seg = np.asarray(x[:, start:end], dtype=np.float64)
    n = end - start
    cum = np.concatenate([np.zeros((len(seg), 1)), np.cumsum(seg, axis=1)], axis=1)
    pos = np.linspace(0.0, n, budget + 1)
    i = np.minimum(np.floor(pos).astype(int), n - 1)
    integral = cum[:, i] + (pos - i)[None] * seg[:, i]           # piecewise-constant integral
    return ((integral[:, 1:] - integral[:, :-1]) / (n / budget)).astype(np.float32)


def build_all_views(series: np.ndarray, lengths: np.ndarray, budget: int, n_fine: int,
                    n_quarters: int) -> np.ndarray:
    """``(N, 1 + A, budget)`` for a table of zero-padded series (same result as ``build_views``
    row by row, vectorised over rows of equal length)."""
    lengths = np.asarray(lengths)
    out = np.zeros((len(series), 1 + n_fine + n_quarters, budget), dtype=np.float32)
    for n in np.unique(lengths):
        rows = np.flatnonzero(lengths == n)
        x = np.asarray(series[rows, :n], dtype=np.float64)
        coarse = batch_area_resample(x, 0, int(n), budget)
        mu = coarse.mean(axis=1, keepdims=True)
        sd = coarse.std(axis=1, keepdims=True) + 1e-3
        views = [coarse] + [batch_area_resample(x, int(s), int(e), budget)
                            for s, e in action_windows(int(n), n_fine, n_quarters)]
        out[rows] = (np.stack(views, axis=1) - mu[:, :, None]) / sd[:, :, None]
    return out


def fraction_read(actions: np.ndarray, lengths: np.ndarray, n_fine: int, n_quarters: int) -> np.ndarray:
    """Share of each series covered by the union of its zoomed windows (the coarse overview,
    which every model sees, is not counted). ``actions`` is ``(N, R)`` with -1 for no zoom."""
    out = np.zeros(len(actions))
    for i, (row, n) in enumerate(zip(actions, lengths)):
        wins = action_windows(int(n), n_fine, n_quarters)
        covered = np.zeros(int(n), dtype=bool)
        for a in row:
            if 0 <= a < len(wins):
                covered[wins[a][0]:wins[a][1]] = True
        out[i] = covered.mean()
    return out


def evidence_actions(evidence: list, length: int, n_fine: int) -> list[int]:
    """Fine windows that hold each evidence segment (the window containing its centre), in order,
    without repeats. Global evidence (the whole series) maps to no particular window."""
    width = length / n_fine
    out: list[int] = []
    for s, e in evidence:
        if e - s >= length // 2:
            continue
        w = int(min(n_fine - 1, ((s + e) / 2) // width))
        if w not in out:
            out.append(w)
    return out


def candidate_actions(evidence: list, decoys: list, length: int, n_fine: int) -> list[int]:
    """Fine windows of every candidate event, real and decoy, in position order: what a reader must
    inspect before it can tell them apart (the oracle controller and the SFT traces visit these)."""
    return sorted(evidence_actions(list(evidence) + list(decoys), length, n_fine))


def coarse_window_scores(coarse: np.ndarray, n_fine: int, bump_len: float) -> np.ndarray:
    """Matched-filter score of a candidate bump in each fine window, from the coarse view alone:
    the coarse view minus a running mean (removes the slow background), correlated with a Hann
    bump as wide as an event at this resolution, maxed over each window's points."""
    x = np.asarray(coarse, dtype=np.float64)
    width = max(3, int(round(bump_len)))
    template = np.hanning(width + 2)[1:-1]
    template = (template - template.mean()) / np.linalg.norm(template - template.mean())
    k = 4 * width + 1
    pad = np.pad(x, k // 2, mode="edge")
    trend = np.convolve(pad, np.ones(k) / k, mode="valid")
    response = np.convolve(x - trend, template[::-1], mode="same")
    return np.array([part.max() for part in np.array_split(response, n_fine)])


def coarse_candidate_precision(coarse: np.ndarray, candidates: list[int], n_fine: int,
                               bump_len: float) -> float:
    """Share of the top-k coarse matched-filter windows (k = number of candidates) that hold a
    candidate event; chance is k / n_fine."""
    k = len(candidates)
    if k == 0:
        return float("nan")
    top = np.argsort(-coarse_window_scores(coarse, n_fine, bump_len))[:k]
    return len(set(top.tolist()) & set(candidates)) / k
