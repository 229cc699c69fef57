"""Science checks of the shared merging blocks (components/common/merging.py, lora.py)."""
import math

import pytest
import torch

from components.common.lora import LoRALinear, apply_deltas, inject_lora, lora_state
from components.common.merging import (effective_rank, merge_core, merge_full, merge_rule, ties,
                                       trim_top_k, tsv)


def random_factors(t=3, m=30, n=24, r=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(m, r, generator=gen, dtype=torch.float64),
             torch.randn(r, n, generator=gen, dtype=torch.float64)) for _ in range(t)]


def test_core_space_task_arithmetic_equals_full_space():
    factors = random_factors()
    b, a = merge_core(factors, merge_rule("ta"))
    assert torch.allclose(b @ a, merge_full(factors, merge_rule("ta")), atol=1e-10)


def test_core_space_tsv_equals_full_space():
    # TSV only uses orthogonally-invariant steps, so the orthonormal core bases lose nothing
    factors = random_factors()
    b, a = merge_core(factors, merge_rule("tsv"))
    assert torch.allclose(b @ a, merge_full(factors, merge_rule("tsv")), atol=1e-8)


def test_core_qr_bases_give_the_same_task_arithmetic():
    factors = random_factors()
    b1, a1 = merge_core(factors, merge_rule("ta"))
    b2, a2 = merge_core(factors, merge_rule("ta"), basis="qr")
    assert torch.allclose(b1 @ a1, b2 @ a2, atol=1e-10)


def test_merged_adapter_has_declared_rank():
    factors = random_factors(t=3, r=3)
    b, a = merge_core(factors, merge_rule("ties"))
    assert b.shape == (30, 9) and a.shape == (9, 24)
    b, a = merge_core(factors, merge_rule("ties"), target_rank=4)
    assert b.shape[1] == a.shape[0] == 4 and torch.linalg.matrix_rank(b @ a) == 4


def test_ties_reference_example():
    stack = torch.tensor([[[3.0, -1.0], [0.5, 2.0]],
                          [[0.7, -4.0], [-0.2, -1.0]]])
    # density 0.5 keeps the 2 largest magnitudes of each task
    trimmed = trim_top_k(stack, 0.5)
    assert torch.equal(trimmed, torch.tensor([[[3.0, 0.0], [0.0, 2.0]], [[0.0, -4.0], [0.0, -1.0]]]))
    # elected signs: +, -, 0, + ; disjoint means: 3, -4, 0, 2 (only agreeing entries count)
    assert torch.allclose(ties(stack, 0.5), torch.tensor([[3.0, -4.0], [0.0, 2.0]]))


def test_tsv_of_orthogonal_tasks_is_their_sum():
    # tasks living on disjoint coordinates do not interfere: whitening changes nothing
    stack = torch.zeros(2, 4, 4, dtype=torch.float64)
    stack[0, 0, 0], stack[1, 2, 3] = 2.0, -1.5
    assert torch.allclose(tsv(stack), stack.sum(0), atol=1e-12)


def test_effective_rank_closed_form():
    assert math.isclose(effective_rank(torch.diag(torch.tensor([1.0, 1.0, 1.0]))), 3.0, rel_tol=1e-9)
    s = torch.tensor([3.0, 1.0], dtype=torch.float64)
    p = s / s.sum()
    expected = math.exp(-float((p * p.log()).sum()))
    assert math.isclose(effective_rank(torch.diag(s)), expected, rel_tol=1e-9)


def test_lora_starts_at_base_and_deltas_fold_into_weights():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    x = torch.randn(7, 5)
    before = net(x)
    names = inject_lora(net, ["0", "2"], rank=2, alpha=4.0)
    assert names == ["0", "2"] and isinstance(net[0], LoRALinear)
    assert torch.allclose(net(x), before)
    assert [n for n, p in net.named_parameters() if p.requires_grad] == \
        ["0.lora_A", "0.lora_B", "2.lora_A", "2.lora_B"]
    with torch.no_grad():
        net[0].lora_B.normal_(), net[2].lora_B.normal_()
    state = lora_state(net)
    merged = apply_deltas(net, {n: f["B"] @ f["A"] for n, f in state.items()})
    assert torch.allclose(merged(x), net(x), atol=1e-5)
    assert not any(isinstance(m, LoRALinear) for m in merged.modules())


def test_inject_lora_rejects_unknown_names():
    with pytest.raises(KeyError):
        inject_lora(torch.nn.Sequential(torch.nn.Linear(2, 2)), ["nope"], rank=1)
