"""Non-autoregressive decoding of a masked region with a masked LM.

IEGR (Iterative Entropy-Guided Refinement), in our words: mask the whole region; at every
step predict all still-open positions, fix the one the model is most sure about (lowest
entropy over the 20 residues) to its sampled residue, re-mask the others and predict again
with the fixed residues as context. Then polish by Gibbs sweeps that re-mask small random
subsets, and return the best state seen (the phase-1 design or the state after any Gibbs
round), judged by the model's own pseudo-log-likelihood of the region (no oracle access). Baselines: one-shot (sample every position from one fully-masked pass) and
left-to-right (fix positions in reading order, one pass each).

``model`` is any callable (1, T) token ids -> (1, T, 20) amino-acid logits.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from components.decodertcr.model import positionwise_pll
from components.decodertcr.tokens import MASK, N_SPECIAL

Model = Callable[[torch.Tensor], torch.Tensor]


def sample_residues(logits: torch.Tensor, temperature: float, gen: torch.Generator) -> torch.Tensor:
    """(n, 20) logits -> n token ids; temperature 0 is argmax."""
    if temperature <= 0:
        return logits.argmax(-1) + N_SPECIAL
    probs = F.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=gen)[:, 0] + N_SPECIAL


def entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


@torch.no_grad()
def one_shot(model: Model, tokens: torch.Tensor, positions: list[int], temperature: float,
             gen: torch.Generator) -> torch.Tensor:
    x = tokens.clone()
    x[positions] = MASK
    x[positions] = sample_residues(model(x[None])[0, positions], temperature, gen)
    return x


@torch.no_grad()
def left_to_right(model: Model, tokens: torch.Tensor, positions: list[int], temperature: float,
                  gen: torch.Generator) -> torch.Tensor:
    x = tokens.clone()
    x[positions] = MASK
    for p in sorted(positions):
        x[p] = sample_residues(model(x[None])[0, [p]], temperature, gen)[0]
    return x


@torch.no_grad()
def iegr(model: Model, tokens: torch.Tensor, positions: list[int], temperature: float,
         gen: torch.Generator, gibbs_rounds: int = 0, gibbs_subset: int = 5
         ) -> tuple[torch.Tensor, list[int]]:
    """Returns the designed tokens and the order in which positions were committed."""
    x = tokens.clone()
    open_positions = list(positions)
    order: list[int] = []
    while open_positions:
        x[open_positions] = MASK                      # re-mask everything not yet committed
        logits = model(x[None])[0, open_positions]
        sampled = sample_residues(logits, temperature, gen)
        best = int(entropy(logits).argmin())          # most confident open position
        x[open_positions[best]] = sampled[best]
        order.append(open_positions.pop(best))
    if gibbs_rounds <= 0:
        return x, order
    best, best_pll = x.clone(), positionwise_pll(model, x, positions)
    for _ in range(gibbs_rounds):                     # phase 2: Gibbs refinement
        for _ in range(len(positions)):
            pick = torch.randperm(len(positions), generator=gen)[:min(gibbs_subset, len(positions))]
            subset = [positions[int(i)] for i in pick]
            x[subset] = MASK
            x[subset] = sample_residues(model(x[None])[0, subset], temperature, gen)
        pll = positionwise_pll(model, x, positions)
        if pll > best_pll:                            # keep the best checkpoint
            best, best_pll = x.clone(), pll
    return best, order


def design(method: str, model: Model, tokens: torch.Tensor, positions: list[int], g,
           seed: int) -> torch.Tensor:
    """Dispatch by name with the ``generate`` params ``g``."""
    gen = torch.Generator().manual_seed(seed)
    if method == "iegr":
        return iegr(model, tokens, positions, g.temperature, gen, g.gibbs_rounds, g.gibbs_subset)[0]
    if method == "one_shot":
        return one_shot(model, tokens, positions, g.temperature, gen)
    if method == "left_to_right":
        return left_to_right(model, tokens, positions, g.temperature, gen)
    raise ValueError(f"unknown decoding method {method!r} (iegr, one_shot, left_to_right)")
