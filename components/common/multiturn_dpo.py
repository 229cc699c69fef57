"""DPO on multi-turn trajectories of (vision-)language models: per-token masks, image inputs
passed through to the model, reference log-probs computed once, the standard sigmoid loss.

Why not ``lm_rl.dpo_train`` (TRL's ``DPOTrainer``): TRL's preference collator builds one prompt
followed by one completion, so its completion mask is a contiguous suffix and images can only
sit in the prompt. An agent's trajectory interleaves the policy's own turns with observation
turns (tool outputs, returned video frames) that it did not choose: those tokens must condition
the later turns but must not count in log pi(trajectory). Here a trajectory is one token
sequence with a *policy mask* (True on the policy's own tokens), and its log-probability is the
sum of log p(token | prefix) over the masked-in tokens only.

The pieces, usable alone:

- ``dpo_sigmoid_loss(pi_w, pi_l, ref_w, ref_l, beta)``: -log sigmoid(beta [(pi_w - ref_w) -
  (pi_l - ref_l)]), mean over pairs (Rafailov et al. 2023), on sequence log-probs.
- ``pad_sequences(seqs, pad_id)``: ``[(ids, policy_mask), ...]`` -> right-padded ``input_ids``,
  ``attention_mask``, ``policy_mask`` tensors.
- ``masked_token_logps(logits, input_ids, policy_mask)``: the masked sum from logits.
- ``sequence_logps(model, input_ids, attention_mask, policy_mask, **inputs)``: one forward pass;
  ``inputs`` (``pixel_values``, ``image_grid_thw``, ...) go to the model untouched.
- ``qwen2_vl_image_inputs(input_ids, image_token_id, pixel_values, image_grid_thw)``: the image
  inputs of a Qwen2-VL / Qwen2.5-VL forward. Under transformers 5.x these models also need
  ``mm_token_type_ids`` (0 text, 1 image, 2 video) whenever images are passed, to place the
  multimodal rotary positions; the processor makes it for plain prompts, this builds it for
  hand-assembled multi-turn sequences.
- ``train_pairs(logps, pairs, optimizer, beta=...)``: epochs of shuffled mini-batch DPO over
  ``(winner row, loser row)`` pairs, with gradient accumulation over micro-batches. ``logps(rows)``
  is the method's function giving the policy's masked log-probs of those trajectory rows
  (differentiable); the reference is, by default, the same function evaluated once without
  gradients before the first update (pi_ref = the policy at the start), so no copy of the model
  is made. Keep the model in eval mode (no dropout) so that pi equals pi_ref exactly there and
  the first loss is log 2.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

LogpFn = Callable[[Sequence[int]], torch.Tensor]


def dpo_sigmoid_loss(pi_w: torch.Tensor, pi_l: torch.Tensor, ref_w: torch.Tensor, ref_l: torch.Tensor,
                     beta: float) -> torch.Tensor:
    """-log sigmoid(beta [(log pi - log ref)(winner) - (log pi - log ref)(loser)]), mean."""
    return -F.logsigmoid(beta * ((pi_w - ref_w) - (pi_l - ref_l))).mean()


def pad_sequences(seqs: Sequence[tuple[Sequence[int], Sequence[bool]]], pad_id: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad ``(ids, policy_mask)`` pairs: (input_ids, attention_mask, policy_mask), each (B, L)."""
    if any(len(ids) != len(mask) for ids, mask in seqs):
        raise ValueError("every sequence needs one policy-mask entry per token")
    L = max(len(ids) for ids, _ in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    attention = torch.zeros(len(seqs), L, dtype=torch.long)
    policy = torch.zeros(len(seqs), L, dtype=torch.bool)
    for i, (s_ids, s_mask) in enumerate(seqs):
        ids[i, :len(s_ids)] = torch.as_tensor(list(s_ids), dtype=torch.long)
        attention[i, :len(s_ids)] = 1
        policy[i, :len(s_ids)] = torch.as_tensor(list(s_mask), dtype=torch.bool)
    return ids, attention, policy


def masked_token_logps(logits: torch.Tensor, input_ids: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """Sum over t of log p(input_ids[t] | input_ids[<t]) where ``policy_mask[t]``: (B,).
    ``logits[:, t]`` predicts token t + 1; the first token has no prediction and never counts."""
    logp = torch.log_softmax(logits[:, :-1].float(), -1)
    picked = logp.gather(-1, input_ids[:, 1:].to(logp.device)[..., None])[..., 0]
    return (picked * policy_mask[:, 1:].to(logp.device)).sum(-1)


def sequence_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, policy_mask: torch.Tensor,
                   **inputs) -> torch.Tensor:
    """The policy-masked log-probability of each sequence under ``model`` (one forward pass,
    differentiable): (B,). Tensors are moved to the model's device; ``inputs`` (image tensors
    and the like) are passed through to the model."""
    dev = next(model.parameters()).device
    moved = {k: v.to(dev) if torch.is_tensor(v) else v for k, v in inputs.items()}
    out = model(input_ids=input_ids.to(dev), attention_mask=attention_mask.to(dev), **moved)
    return masked_token_logps(out.logits, input_ids, policy_mask)


def qwen2_vl_image_inputs(input_ids: torch.Tensor, image_token_id: int, pixel_values: torch.Tensor,
                          image_grid_thw: torch.Tensor, dtype: torch.dtype | None = None) -> dict:
    """Image inputs of a Qwen2-VL-family forward for sequences that hold the images' tokens
    (``image_token_id``, one run per image, in order): the patches of every image of the batch
    in sequence order, one (t, h, w) grid row per image, and ``mm_token_type_ids`` (1 on image
    tokens, 0 elsewhere). ``dtype``: cast the patches (e.g. to the model's bf16)."""
    return {"pixel_values": pixel_values if dtype is None else pixel_values.to(dtype),
            "image_grid_thw": image_grid_thw,
            "mm_token_type_ids": (input_ids == image_token_id).long()}


@dataclass
class DPOResult:
    """Per optimizer step: the loss, the mean implicit-reward margin beta [(pi_w - ref_w) -
    (pi_l - ref_l)] and the share of pairs with a positive margin, all before the step."""
    losses: list[float] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)
    n_pairs: int = 0


@torch.no_grad()
def reference_logps(logps: LogpFn, rows: Sequence[int], batch: int = 8) -> dict[int, float]:
    """``logps`` of each row, without gradients, ``batch`` rows per call: {row: log-prob}."""
    rows = list(dict.fromkeys(int(r) for r in rows))
    out: dict[int, float] = {}
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        out.update(zip(chunk, logps(chunk).detach().float().cpu().tolist()))
    return out


def train_pairs(logps: LogpFn, pairs: Sequence[tuple[int, int]], optimizer: torch.optim.Optimizer, *,
                beta: float, epochs: int = 1, batch_size: int = 8, micro_batch: int | None = None,
                rng: np.random.Generator | None = None, ref_logps: LogpFn | None = None,
                ref_batch: int = 8) -> DPOResult:
    """Sigmoid DPO on trajectory pairs ``(winner row, loser row)``: ``epochs`` shuffled passes,
    ``batch_size`` pairs per optimizer step, ``micro_batch`` pairs per forward/backward
    (gradients accumulate; the step's loss is the mean over its pairs either way).
    ``ref_logps``: the reference's function; default ``logps`` itself, evaluated once before
    any update. The optimizer must hold the trainable parameters ``logps`` depends on."""
    pairs = [(int(w), int(l)) for w, l, *_ in pairs]
    result = DPOResult(n_pairs=len(pairs))
    if not pairs:
        return result
    ref = reference_logps(ref_logps or logps, [r for p in pairs for r in p], ref_batch)
    rng = rng if rng is not None else np.random.default_rng(0)
    bs = max(1, min(batch_size, len(pairs)))
    mb = max(1, min(micro_batch or bs, bs))
    for _ in range(epochs):
        order = rng.permutation(len(pairs))
        for start in range(0, len(order), bs):
            step = [pairs[j] for j in order[start:start + bs]]
            optimizer.zero_grad()
            loss_sum, margins = 0.0, []
            for m in range(0, len(step), mb):
                chunk = step[m:m + mb]
                w = [p[0] for p in chunk]
                l_ = [p[1] for p in chunk]
                lp = logps(w + l_).float().cpu()
                pw, pl = lp[:len(chunk)], lp[len(chunk):]
                rw = torch.tensor([ref[r] for r in w])
                rl = torch.tensor([ref[r] for r in l_])
                loss = dpo_sigmoid_loss(pw, pl, rw, rl, beta) * (len(chunk) / len(step))
                loss.backward()
                loss_sum += loss.item()
                margins += (beta * ((pw - rw) - (pl - rl))).detach().tolist()
            optimizer.step()
            result.losses.append(loss_sum)
            result.margins.append(float(np.mean(margins)))
            result.accuracies.append(float(np.mean(np.array(margins) > 0)))
    return result
