"""Science checks of CircuMerge (our instantiation): transform, sketch, exactness vs Core Space."""
import numpy as np
import pytest
import scipy.linalg
import torch

from components.circumerge.sketch import (circulant_transform, circumerge, sketch_rows,
                                          sketched_bases)
from components.common.merging import merge_core, merge_full, merge_rule


def random_factors(t=4, m=64, n=48, r=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(m, r, generator=gen, dtype=torch.float64),
             torch.randn(r, n, generator=gen, dtype=torch.float64)) for _ in range(t)]


@pytest.mark.parametrize("size", [15, 16])
def test_circulant_transform_is_real_orthogonal_and_matches_explicit_circulant(size):
    transform = circulant_transform(size, torch.Generator().manual_seed(3))
    dense = transform.dense()
    assert torch.allclose(dense.T @ dense, torch.eye(size, dtype=torch.float64), atol=1e-12)
    x = torch.randn(size, 5, dtype=torch.float64)
    assert torch.allclose(transform.apply(x).norm(dim=0), x.norm(dim=0))
    # C D: the explicit circulant from C's first column (scipy reference) times the sign diagonal
    c_first_column = (dense * transform.signs[None, :])[:, 0].numpy()
    explicit = scipy.linalg.circulant(c_first_column) @ np.diag(transform.signs.numpy())
    assert np.allclose(explicit, dense.numpy(), atol=1e-12)


@pytest.mark.parametrize("rule", ["ta", "ties", "tsv"])
def test_without_sampling_circumerge_equals_core_space(rule):
    factors = random_factors()
    b_core, a_core = merge_core(factors, merge_rule(rule))
    b, a = circumerge(factors, merge_rule(rule), seed=7, sketch_factor=None)
    assert torch.allclose(b @ a, b_core @ a_core, atol=1e-5)


def test_task_arithmetic_is_exact_with_any_sketch():
    # B = U_B S V^T holds exactly for the implicit basis, so linear rules lose nothing
    factors = random_factors(m=256, n=200)
    b, a = circumerge(factors, merge_rule("ta"), seed=1, sketch_factor=2.0)
    assert torch.allclose(b @ a, merge_full(factors, merge_rule("ta")), atol=1e-8)


def test_merged_adapter_is_a_standard_lora_of_declared_rank():
    factors = random_factors(t=4, r=3)
    b, a = circumerge(factors, merge_rule("ties"), seed=0, sketch_factor=2.0)
    assert b.shape == (64, 12) and a.shape == (12, 48)
    b, a = circumerge(factors, merge_rule("ties"), seed=0, sketch_factor=2.0, target_rank=5)
    assert b.shape == (64, 5) and a.shape == (5, 48)


def test_the_transform_is_shared_by_all_tasks():
    # the sketch of the stacked factors is the stack of per-task sketches under one transform:
    # sketching task by task with the same seed gives the same columns
    factors = random_factors()
    b_stack = torch.cat([b for b, _ in factors], 1)
    transform = circulant_transform(64, torch.Generator().manual_seed(5))
    together = sketch_rows(b_stack, transform, 20, torch.Generator().manual_seed(9))
    apart = torch.cat([sketch_rows(b, transform, 20, torch.Generator().manual_seed(9)) for b, _ in factors], 1)
    assert torch.allclose(together, apart, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_sketch_preserves_singular_values_of_incoherent_stacks(seed):
    # s = 2 * Tr * ln Tr rows out of 2048: singular values within (1 +- eps) of the truth
    factors = random_factors(t=4, m=2048, n=64, r=4, seed=seed)
    b_stack = torch.cat([b for b, _ in factors], 1)
    a_stack = torch.cat([a for _, a in factors], 0)
    bases = sketched_bases(b_stack, a_stack, seed=seed, sketch_factor=2.0)
    truth = torch.linalg.svdvals(b_stack)
    ratio = bases.sigma_b / truth
    assert float(ratio.min()) > 0.6 and float(ratio.max()) < 1.4
