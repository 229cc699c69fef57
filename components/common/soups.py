"""Weight averaging of models that share an initialisation ("model soups").

Generic over any torch state dict, so every merging method can reuse it:
- ``uniform_soup`` / ``weighted_soup``: a (convex) average of checkpoints;
- ``interpolate``: the point (1 - t) * a + t * b on the segment between two checkpoints;
- ``greedy_soup``: add checkpoints in order of a held-out score, keep each only if the score of
  the soup does not drop (Wortsman et al., 2022);
- ``stack_state_dicts`` / ``mix_stacked``: the same average, but differentiable in the weights,
  for methods that *learn* mixing weights (use with ``torch.func.functional_call``).

Floating-point entries are averaged; integer/bool buffers (counters, masks) cannot be
averaged meaningfully, so they must agree across ingredients and are copied through.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch

StateDict = Mapping[str, torch.Tensor]


def _check_same_keys(state_dicts: Sequence[StateDict]) -> None:
    if not state_dicts:
        raise ValueError("a soup needs at least one ingredient")
    keys = list(state_dicts[0])
    for i, sd in enumerate(state_dicts[1:], start=1):
        if list(sd) != keys:
            missing = set(keys) ^ set(sd)
            raise ValueError(f"ingredient {i} has different keys than ingredient 0: {sorted(missing)[:5]}")


def _copy_through(name: str, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    first = tensors[0]
    if any(not torch.equal(first, t) for t in tensors[1:]):
        raise ValueError(f"non-float entry {name!r} differs between ingredients; cannot average it")
    return first.clone()


def normalise_weights(weights: Sequence[float] | torch.Tensor | None, n: int) -> torch.Tensor:
    if weights is None:
        return torch.full((n,), 1.0 / n, dtype=torch.float64)
    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.shape != (n,) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"need {n} non-negative weights with a positive sum, got {w.tolist()}")
    return w / w.sum()


def weighted_soup(state_dicts: Sequence[StateDict], weights: Sequence[float] | None = None) -> dict[str, torch.Tensor]:
    """sum_i w_i * theta_i with weights normalised to sum to 1 (uniform when ``weights`` is None)."""
    _check_same_keys(state_dicts)
    w = normalise_weights(weights, len(state_dicts))
    soup = {}
    for name in state_dicts[0]:
        tensors = [sd[name] for sd in state_dicts]
        if not tensors[0].is_floating_point():
            soup[name] = _copy_through(name, tensors)
            continue
        # accumulate in float64 so that a soup of identical models is that model up to rounding
        acc = sum(wi * t.detach().to(torch.float64) for wi, t in zip(w.tolist(), tensors))
        soup[name] = acc.to(tensors[0].dtype)
    return soup


def uniform_soup(state_dicts: Sequence[StateDict]) -> dict[str, torch.Tensor]:
    return weighted_soup(state_dicts)


def interpolate(a: StateDict, b: StateDict, t: float) -> dict[str, torch.Tensor]:
    """(1 - t) * a + t * b; t = 0 returns a and t = 1 returns b exactly."""
    if t == 0.0:
        return {k: v.clone() for k, v in a.items()}
    if t == 1.0:
        return {k: v.clone() for k, v in b.items()}
    return weighted_soup([a, b], [1.0 - t, t])


def greedy_soup(
    state_dicts: Sequence[StateDict],
    scores: Sequence[float],
    evaluate: Callable[[StateDict], float],
) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Greedy soup: visit ingredients from best to worst held-out ``scores``; keep one in the
    uniform soup only if ``evaluate`` (higher is better, on held-out data) does not decrease.
    Returns the soup and the indices kept, in the order they were added."""
    order = sorted(range(len(state_dicts)), key=lambda i: -scores[i])
    kept = [order[0]]
    best = evaluate(state_dicts[order[0]])
    for i in order[1:]:
        candidate = uniform_soup([state_dicts[j] for j in kept + [i]])
        score = evaluate(candidate)
        if score >= best:
            kept, best = kept + [i], score
    return uniform_soup([state_dicts[j] for j in kept]), kept


def stack_state_dicts(state_dicts: Sequence[StateDict]) -> dict[str, torch.Tensor]:
    """{name: (n, *shape)} of the float entries, ready for ``mix_stacked``."""
    _check_same_keys(state_dicts)
    return {name: torch.stack([sd[name].detach() for sd in state_dicts])
            for name in state_dicts[0] if state_dicts[0][name].is_floating_point()}


def mix_stacked(stacked: Mapping[str, torch.Tensor], weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """sum_i weights[i] * theta_i, differentiable in ``weights`` (the caller normalises them)."""
    return {name: torch.tensordot(weights.to(t.dtype), t, dims=1) for name, t in stacked.items()}
