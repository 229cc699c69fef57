"""The student objective: L = w_S * L_S + beta * L_Dir (+ optional label CE).

Why decoupling works with alpha = exp(z): softmax(z) is invariant to adding a constant to z,
so L_S (which only sees softmax(z / T)) fixes the *mean* prediction, while the free shift of z
is the Dirichlet precision alpha_0 = sum exp(z) that L_Dir sets from the teachers' spread.
Both act on the same logits, but L_S dominates the argmax when beta is small.

Scale: L_Dir follows the EnD^2 reference (Malinin et al. 2020): the teachers' probabilities and
the student's concentration are both taken at the distillation temperature T (alpha = exp(z / T))
and the loss is multiplied by T^2, like Hinton KD. At T = 1 with trained-scale logits (|z| ~ 10)
alpha ~ e^10 and the Dirichlet gradient is hundreds of times the KD one, so even beta = 0.05 let
L_Dir set the update direction; at T = 2 the two are within a few x of each other (unit test).

Teacher weights ``w`` [B, M] are the per-sample unseen mask normalised to sum to one, so a
masked-out teacher contributes exactly nothing.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def mask_weights(mask: torch.Tensor) -> torch.Tensor:
    mask = mask.float()
    return mask / mask.sum(dim=1, keepdim=True)


def distill_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                 weights: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * KL(pbar || softmax(z / T)), pbar the weighted mean of teacher softmax(f_m / T)."""
    teacher_probs = torch.softmax(teacher_logits / temperature, dim=-1)          # [B, M, C]
    target = (weights.unsqueeze(-1) * teacher_probs).sum(dim=1)                    # [B, C]
    log_student = F.log_softmax(student_logits / temperature, dim=-1)
    kl = (target * (torch.log(target.clamp_min(1e-12)) - log_student)).sum(dim=-1)
    return temperature**2 * kl.mean()


def dirichlet_log_prob(probs: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """log Dir(probs | alpha) over the last dim; ``alpha`` broadcasts against ``probs``."""
    return (torch.lgamma(alpha.sum(-1)) - torch.lgamma(alpha).sum(-1)
            + ((alpha - 1.0) * torch.log(probs)).sum(-1))


def dirichlet_alpha(logits: torch.Tensor, clip: float) -> torch.Tensor:
    return torch.exp(logits.clamp(-clip, clip))


def smooth_probs(teacher_logits: torch.Tensor, floor: float) -> torch.Tensor:
    """Teacher softmax clamped away from 0 and renormalised (EnD^2), so log(pi) is finite."""
    probs = torch.softmax(teacher_logits, dim=-1).clamp_min(floor)
    return probs / probs.sum(dim=-1, keepdim=True)


def dirichlet_nll(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                  weights: torch.Tensor, temperature: float, clip: float, floor: float) -> torch.Tensor:
    """EnD^2: -T^2 sum_m w_m log Dir(pi_m^T | exp(z / T)), averaged over the batch."""
    alpha = dirichlet_alpha(student_logits / temperature, clip).unsqueeze(1)     # [B, 1, C]
    probs = smooth_probs(teacher_logits / temperature, floor)                       # [B, M, C]
    log_p = dirichlet_log_prob(probs, alpha)                                        # [B, M]
    return -temperature**2 * (weights * log_p).sum(dim=1).mean()


def student_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor,
                 labels: torch.Tensor, *, distill_weight: float, dirichlet_weight: float,
                 label_weight: float, temperature: float, clip: float, floor: float) -> torch.Tensor:
    weights = mask_weights(mask)
    loss = student_logits.new_zeros(())
    if distill_weight:
        loss = loss + distill_weight * distill_loss(student_logits, teacher_logits, weights, temperature)
    if dirichlet_weight:
        loss = loss + dirichlet_weight * dirichlet_nll(student_logits, teacher_logits, weights,
                                                       temperature, clip, floor)
    if label_weight:
        loss = loss + label_weight * F.cross_entropy(student_logits, labels)
    return loss
