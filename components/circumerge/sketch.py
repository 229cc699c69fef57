"""CircuMerge (our instantiation): Core Space merging with bases estimated from small sketches.

Only the abstract of the paper is public, so this is our reading of it on top of Core Space:

1. One random transform per side, shared by every task: ``Phi = C D`` with ``D`` a random sign
   diagonal and ``C`` an orthogonal circulant (unit-modulus, conjugate-symmetric spectrum),
   applied with a real FFT in O(m log m) per column. Sharing it puts all tasks in one
   coordinate system; mixing by ``C D`` spreads every column's energy evenly over the rows.
2. Because the rows of ``Phi B`` are incoherent, a uniform sample of ``s`` of them (rescaled by
   ``sqrt(m / s)``) preserves the Gram ``B^T B`` (a subspace embedding, as for SRHT sketches).
3. The small SVD of the sketch gives ``(V_B, Sigma_B)``. With the implicit basis
   ``U_B = B V_B Sigma_B^-1`` (never formed), ``B = U_B Sigma_B V_B^T`` holds exactly, so each
   task's core ``U_B^T B_t A_t V_A`` is ``Sigma_B (V_B^T E_t)(E_t^T U_A) Sigma_A``, a product of
   tiny matrices (``E_t`` picks task t's r columns). Same on the ``A`` side, sampling columns
   of ``A Phi^T``; no m x Tr product is needed to build the cores.
4. The merge rule runs on the cores; the merged core is folded back into a standard adapter
   ``B* = B (V_B Sigma_B^-1 M)``, ``A* = (Sigma_A^-1 U_A^T) A``.

Step 3 is exact for any sketch, so linear rules (task arithmetic) lose nothing; the sketch
only decides how orthonormal the implicit basis is, which matters for TIES/TSV.
With ``s = m`` (no sampling) the bases are Core Space's and the merge equals it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from components.common.merging import Factors, low_rank_from_core, stack_factors


@dataclass(frozen=True)
class CirculantTransform:
    """``x -> C D x`` along dim 0, with ``C = F^-1 diag(spectrum) F`` orthogonal."""

    signs: torch.Tensor      # (m,) +-1
    spectrum: torch.Tensor   # (m // 2 + 1,) complex, |.| = 1, real at DC (and Nyquist)

    @property
    def size(self) -> int:
        return self.signs.shape[0]

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        mixed = torch.fft.rfft(self.signs.to(x.dtype)[:, None] * x, dim=0)
        return torch.fft.irfft(mixed * self.spectrum.to(mixed.dtype)[:, None], n=self.size, dim=0)

    def dense(self, dtype=torch.float64) -> torch.Tensor:
        """The explicit m x m matrix ``C D`` (tests only)."""
        return self.apply(torch.eye(self.size, dtype=dtype))


def circulant_transform(size: int, generator: torch.Generator) -> CirculantTransform:
    signs = torch.randint(0, 2, (size,), generator=generator).double() * 2 - 1
    phases = torch.rand(size // 2 + 1, generator=generator, dtype=torch.float64) * 2 * math.pi
    spectrum = torch.polar(torch.ones_like(phases), phases)
    # a real circulant needs real eigenvalues at DC and, for even sizes, at Nyquist; +-1 keeps |.|=1
    spectrum[0] = torch.sign(spectrum[0].real) + 0j
    if size % 2 == 0:
        spectrum[-1] = torch.sign(spectrum[-1].real) + 0j
    spectrum[spectrum == 0] = 1.0
    return CirculantTransform(signs, spectrum)


def sketch_size(size: int, columns: int, factor: float | None) -> int:
    """``ceil(factor * Tr * ln Tr)`` rows (the usual subspace-embedding size for incoherent
    rows), capped at ``size``; ``None`` means no sampling."""
    if factor is None:
        return size
    return min(size, max(columns, math.ceil(factor * columns * math.log(max(columns, 2)))))


def sketch_rows(x: torch.Tensor, transform: CirculantTransform, rows: int,
                generator: torch.Generator) -> torch.Tensor:
    """Uniform sample of ``rows`` rows of ``Phi x``, rescaled so ``S^T S`` estimates ``x^T x``."""
    mixed = transform.apply(x)
    if rows >= transform.size:
        return mixed
    picked = torch.randperm(transform.size, generator=generator)[:rows]
    return mixed[picked] * math.sqrt(transform.size / rows)


def right_structure(sketch: torch.Tensor, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(V, sigma)`` of the sketch's SVD, dropping directions below ``rtol * sigma_max``
    (dividing by them would only amplify noise)."""
    _, sigma, vh = torch.linalg.svd(sketch, full_matrices=False)
    keep = sigma > rtol * sigma[0]
    return vh[keep].T, sigma[keep]


@dataclass
class SketchedBases:
    v_b: torch.Tensor        # Tr x k_b
    sigma_b: torch.Tensor    # k_b
    u_a: torch.Tensor        # Tr x k_a   (A = U_A Sigma_A V_A^T, V_A implicit)
    sigma_a: torch.Tensor    # k_a


def sketched_bases(b_stack: torch.Tensor, a_stack: torch.Tensor, seed: int,
                   sketch_factor: float | None, rtol: float = 1e-6) -> SketchedBases:
    """Shared transforms from one seed for all tasks, then one small SVD per side."""
    gen = torch.Generator().manual_seed(seed)
    m, tr = b_stack.shape
    n = a_stack.shape[1]
    phi_m, phi_n = circulant_transform(m, gen), circulant_transform(n, gen)
    s_b = sketch_rows(b_stack, phi_m, sketch_size(m, tr, sketch_factor), gen)
    s_a = sketch_rows(a_stack.T, phi_n, sketch_size(n, tr, sketch_factor), gen)
    v_b, sigma_b = right_structure(s_b, rtol)
    u_a, sigma_a = right_structure(s_a, rtol)
    return SketchedBases(v_b, sigma_b, u_a, sigma_a)


def sketched_cores(bases: SketchedBases, rank_per_task: Sequence[int]) -> torch.Tensor:
    """``M_t = Sigma_B V_B^T E_t E_t^T U_A Sigma_A`` for each task block ``E_t``: (T, k_b, k_a)."""
    left = bases.sigma_b[:, None] * bases.v_b.T      # k_b x Tr
    right = bases.u_a * bases.sigma_a[None, :]        # Tr x k_a
    cores, start = [], 0
    for r in rank_per_task:
        cores.append(left[:, start:start + r] @ right[start:start + r])
        start += r
    return torch.stack(cores)


def circumerge(factors: Factors, rule: Callable[[torch.Tensor], torch.Tensor], seed: int,
               sketch_factor: float | None = 2.0, target_rank: int | None = None,
               rtol: float = 1e-6, return_cores: bool = False):
    """Merge LoRA ``factors`` with ``rule`` in the sketched core space; returns ``(B*, A*)``."""
    b_stack, a_stack = stack_factors(factors)
    bases = sketched_bases(b_stack, a_stack, seed, sketch_factor, rtol)
    cores = sketched_cores(bases, [b.shape[1] for b, _ in factors])
    merged = rule(cores)
    # fold every small factor together first so each side costs one big product (m x Tr x k)
    left_small, right_small = low_rank_from_core(bases.v_b / bases.sigma_b[None, :], merged,
                                                 (bases.u_a / bases.sigma_a[None, :]).T, target_rank)
    adapter = (b_stack @ left_small, right_small @ a_stack)
    return (adapter, cores, merged) if return_cores else adapter
