"""Projection hooks: closed-form properties and attach/remove behaviour."""
import pytest
import torch

from components.caft.ablation import ablation_hooks, has_hooks, orthonormal_basis, project_out
from components.caft.minilm import UpperClassifier
from components.common.minilm import HIDDEN, BertLayer


def _basis(k: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return orthonormal_basis(torch.randn(k, HIDDEN, generator=gen) * 3 + 1)  # not orthonormal


def _tiny_model(seed: int = 0) -> UpperClassifier:
    torch.manual_seed(seed)
    return UpperClassifier([BertLayer(), BertLayer()], first=4).eval()  # MiniLM layers 4, 5


def test_basis_is_orthonormal_and_spans_the_directions():
    v = torch.randn(5, HIDDEN)
    q = orthonormal_basis(v)
    assert q.shape == (HIDDEN, 5)
    torch.testing.assert_close(q.T @ q, torch.eye(5), atol=1e-5, rtol=0)
    torch.testing.assert_close(project_out(v, q), torch.zeros_like(v), atol=1e-4, rtol=0)


def test_projection_zeroes_subspace_and_is_idempotent():
    h, q = torch.randn(4, 7, HIDDEN), _basis(6)
    once = project_out(h, q)
    assert (once @ q).abs().max() < 1e-4
    torch.testing.assert_close(project_out(once, q), once, atol=1e-5, rtol=0)
    # the orthogonal complement is untouched
    torch.testing.assert_close(h - once, (h @ q) @ q.T, atol=1e-5, rtol=0)


def test_projection_edge_cases():
    h = torch.randn(3, HIDDEN)
    assert project_out(h, torch.eye(HIDDEN)).abs().max() < 1e-5
    empty = orthonormal_basis(torch.zeros(0, HIDDEN))
    assert torch.equal(project_out(h, empty), h)


def test_hooks_ablate_residual_stream_during_training_only():
    model = _tiny_model()
    h, mask = torch.randn(2, 9, HIDDEN), torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    bases = {3: _basis(4, 1), 4: _basis(3, 2), 5: _basis(2, 3)}  # layer 3 = the cached input
    clean = model(h, mask)
    seen = {}  # what block 4 actually receives (a forward hook sees the pre-hooked input)
    probe = model.blocks[0].register_forward_hook(lambda m, args, out: seen.__setitem__("in", args[0]))
    with ablation_hooks(model, bases):
        assert has_hooks(model)
        res = model.residuals(h, mask)
        hooked = model(h, mask)
    for layer in (4, 5):
        assert (res[layer] @ bases[layer]).abs().max() < 1e-4
    assert (seen["in"] @ bases[3]).abs().max() < 1e-4  # the cache is ablated before block 4
    assert not (hooked - clean).abs().max() < 1e-6     # ablation changed the forward pass
    probe.remove()
    assert not has_hooks(model)
    torch.testing.assert_close(model(h, mask), clean)  # eval: identical to a hook-free model


def test_hooks_removed_after_an_exception():
    model = _tiny_model()
    with pytest.raises(RuntimeError):
        with ablation_hooks(model, {5: _basis(2)}):
            raise RuntimeError("training crashed")
    assert not has_hooks(model)


def test_unknown_layer_is_refused():
    with pytest.raises(ValueError, match="not hookable"):
        with ablation_hooks(_tiny_model(), {1: _basis(1)}):
            pass
