"""Model-merging baselines: task vectors, merge rules, and the spaces they are applied in.

A *rule* maps a stack of same-shaped task updates ``(T, p, q)`` to one merged update:
- ``task_arithmetic``: the sum (Ilharco et al., 2023); the scaling coefficient is applied later.
- ``ties``: trim each update to its top-``density`` magnitudes, elect a sign per entry by the
  summed mass, average only the agreeing entries (Yadav et al., 2023).
- ``dare``: drop entries with probability p and rescale by 1/(1-p), then sum (Yu et al., 2024).
- ``tsv``: keep each task's top singular directions, whiten the concatenated bases so tasks
  stop interfering, rebuild (TSV-Merge, Gargiulo et al., 2025).

A *space* says where the rule runs for LoRA adapters ``delta_t = B_t A_t``:
- ``merge_full``: on the dense deltas (m x n).
- ``merge_core``: in Core Space (Panariello et al., 2025): with orthonormal bases ``U_B`` of the
  stacked ``[B_1..B_T]`` and ``V_A`` of the stacked ``[A_1;..;A_T]``, each task becomes a small
  ``Tr x Tr`` core ``U_B^T B_t A_t V_A``; the merged core is mapped back as ``U_B M V_A^T``.
  Lossless for linear rules. Returns a standard low-rank adapter ``(B*, A*)``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

Factors = Sequence[tuple[torch.Tensor, torch.Tensor]]  # [(B_t, A_t)], B_t: m x r, A_t: r x n


# ----------------------------------------------------------------------------- task vectors
def task_vector(finetuned: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fine-tuned minus base weights, for the keys both share."""
    return {k: finetuned[k] - base[k] for k in finetuned if k in base}


def lora_deltas(factors: Factors) -> torch.Tensor:
    """Dense deltas ``(T, m, n)`` of a list of LoRA factor pairs."""
    return torch.stack([b @ a for b, a in factors])


# ----------------------------------------------------------------------------- merge rules
def task_arithmetic(stack: torch.Tensor) -> torch.Tensor:
    return stack.sum(0)


def trim_top_k(stack: torch.Tensor, density: float) -> torch.Tensor:
    """Keep the ``density`` fraction of largest-magnitude entries of each task, zero the rest."""
    flat = stack.reshape(stack.shape[0], -1)
    k = max(1, int(round(density * flat.shape[1])))
    threshold = flat.abs().kthvalue(flat.shape[1] - k + 1, dim=1, keepdim=True).values
    return (flat * (flat.abs() >= threshold)).reshape(stack.shape)


def ties(stack: torch.Tensor, density: float = 0.2) -> torch.Tensor:
    trimmed = trim_top_k(stack, density)
    elected = torch.sign(trimmed.sum(0))
    agree = (torch.sign(trimmed) == elected) & (trimmed != 0)
    total = (trimmed * agree).sum(0)
    count = agree.sum(0).clamp(min=1)
    return total / count


def dare(stack: torch.Tensor, drop: float = 0.5, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    keep = torch.rand(stack.shape, generator=gen, dtype=torch.float64) >= drop
    return (stack * keep.to(stack.dtype) / (1 - drop)).sum(0)


def _orthogonal_polar(x: torch.Tensor) -> torch.Tensor:
    """Closest matrix with orthonormal columns (polar factor ``P Q^T`` of ``x = P S Q^T``)."""
    p, _, qh = torch.linalg.svd(x, full_matrices=False)
    return p @ qh


def tsv(stack: torch.Tensor, fraction: float | None = None) -> torch.Tensor:
    """TSV-Merge: per task keep ``k = fraction * min(p, q)`` singular triplets (default 1/T),
    replace the concatenated singular bases by their nearest orthonormal ones, rebuild."""
    t, p, q = stack.shape
    fraction = 1.0 / t if fraction is None else fraction
    k = max(1, min(min(p, q), int(fraction * min(p, q))))
    us, ss, vs = [], [], []
    for delta in stack:
        u, s, vh = torch.linalg.svd(delta, full_matrices=False)
        # a LoRA delta has rank <= r: its null directions are arbitrary and must not be whitened in
        kept = min(k, int((s > s[0] * torch.finfo(s.dtype).eps * max(p, q)).sum()))
        us.append(u[:, :kept]), ss.append(s[:kept]), vs.append(vh[:kept].T)
    u_cat, v_cat = torch.cat(us, 1), torch.cat(vs, 1)
    s_cat = torch.cat(ss)
    if u_cat.shape[1] > min(p, q):  # more kept directions than the space holds: whitening is undefined
        raise ValueError(f"tsv: T*k={u_cat.shape[1]} exceeds min(p, q)={min(p, q)}; lower fraction")
    return _orthogonal_polar(u_cat) @ torch.diag(s_cat) @ _orthogonal_polar(v_cat).T


RULES: dict[str, Callable[..., torch.Tensor]] = {
    "ta": task_arithmetic, "ties": ties, "dare": dare, "tsv": tsv,
}


def merge_rule(name: str, **kwargs) -> Callable[[torch.Tensor], torch.Tensor]:
    """The rule ``name`` with its knobs bound, e.g. ``merge_rule("ties", density=0.2)``."""
    if name not in RULES:
        raise KeyError(f"unknown merge rule {name!r}; choose one of {', '.join(RULES)}")
    return lambda stack: RULES[name](stack, **kwargs)


# ----------------------------------------------------------------------------- spaces
def merge_full(factors: Factors, rule: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Rule applied to the dense deltas; returns the dense merged delta (m x n)."""
    return rule(lora_deltas(factors))


def stack_factors(factors: Factors) -> tuple[torch.Tensor, torch.Tensor]:
    """``B = [B_1 .. B_T]`` (m x Tr) and ``A = [A_1; ..; A_T]`` (Tr x n)."""
    return torch.cat([b for b, _ in factors], 1), torch.cat([a for _, a in factors], 0)


def core_bases(b_stack: torch.Tensor, a_stack: torch.Tensor,
               basis: str = "svd") -> tuple[torch.Tensor, torch.Tensor]:
    """``U_B`` (m x Tr), left singular vectors of B; ``V_A`` (n x Tr), right singular vectors of A.
    ``basis="qr"`` takes any orthonormal bases of the same spans (cheaper; same merge for rules
    that are invariant to a rotation of the core, e.g. TA and TSV, not TIES)."""
    if basis == "qr":
        return torch.linalg.qr(b_stack)[0], torch.linalg.qr(a_stack.T)[0]
    if basis != "svd":
        raise ValueError(f"unknown basis {basis!r} (svd, qr)")
    u_b = torch.linalg.svd(b_stack, full_matrices=False)[0]
    v_a = torch.linalg.svd(a_stack, full_matrices=False)[2].T
    return u_b, v_a


def core_matrices(factors: Factors, u_b: torch.Tensor, v_a: torch.Tensor) -> torch.Tensor:
    """Cores ``M_t = (U_B^T B_t)(A_t V_A)``, stacked ``(T, Tr, Tr)``."""
    return torch.stack([(u_b.T @ b) @ (a @ v_a) for b, a in factors])


def low_rank_from_core(left: torch.Tensor, core: torch.Tensor, right_t: torch.Tensor,
                       target_rank: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Adapter ``(B*, A*)`` with ``B* A* = left @ core @ right_t``. At full core rank the core is
    folded into ``B*``; a smaller ``target_rank`` keeps the core's top singular triplets."""
    if target_rank is None or target_rank >= core.shape[0]:
        return left @ core, right_t
    u, s, vh = torch.linalg.svd(core, full_matrices=False)
    root = s[:target_rank].sqrt()
    return left @ (u[:, :target_rank] * root), (root[:, None] * vh[:target_rank]) @ right_t


def merge_core(factors: Factors, rule: Callable[[torch.Tensor], torch.Tensor],
               target_rank: int | None = None, return_cores: bool = False, basis: str = "svd"):
    """Core Space merge; returns ``(B*, A*)`` (and the task cores and merged core if asked)."""
    b_stack, a_stack = stack_factors(factors)
    u_b, v_a = core_bases(b_stack, a_stack, basis)
    cores = core_matrices(factors, u_b, v_a)
    merged = rule(cores)
    adapter = low_rank_from_core(u_b, merged, v_a.T, target_rank)
    return (adapter, cores, merged) if return_cores else adapter


# ----------------------------------------------------------------------------- diagnostics
def effective_rank(x: torch.Tensor, eps: float = 1e-12) -> float:
    """Roy & Vetterli (2007): ``exp`` of the entropy of the normalised singular values."""
    s = torch.linalg.svdvals(x.double())
    p = s / s.sum().clamp(min=eps)
    p = p[p > eps]
    return float(torch.exp(-(p * p.log()).sum()))
