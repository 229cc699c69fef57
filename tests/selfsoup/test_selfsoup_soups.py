"""components.common.soups: uniform/weighted/greedy soups and interpolation of state dicts."""
import pytest
import torch

from components.common.soups import (greedy_soup, interpolate, mix_stacked, normalise_weights,
                                     stack_state_dicts, uniform_soup, weighted_soup)
from components.selfsoup.vit import Classifier, Encoder


def _state(seed):
    torch.manual_seed(seed)
    return Classifier(Encoder(dim=16, depth=1, heads=2)).state_dict()


def test_soup_of_identical_models_is_the_model():
    sd = _state(0)
    soup = uniform_soup([sd, sd, sd])
    for k in sd:
        torch.testing.assert_close(soup[k], sd[k], rtol=0, atol=1e-7)


def test_uniform_soup_is_the_mean():
    a, b = _state(0), _state(1)
    soup = uniform_soup([a, b])
    for k in a:
        torch.testing.assert_close(soup[k], (a[k] + b[k]) / 2)


def test_weights_are_normalised_and_validated():
    w = normalise_weights([2.0, 6.0], 2)
    assert torch.allclose(w, torch.tensor([0.25, 0.75], dtype=torch.float64))
    with pytest.raises(ValueError):
        normalise_weights([1.0, -1.0], 2)
    with pytest.raises(ValueError):
        normalise_weights([1.0], 2)


def test_interpolation_endpoints_are_exact_and_midpoint_is_mean():
    a, b = _state(0), _state(1)
    for k in a:
        assert torch.equal(interpolate(a, b, 0.0)[k], a[k])
        assert torch.equal(interpolate(a, b, 1.0)[k], b[k])
        torch.testing.assert_close(interpolate(a, b, 0.5)[k], (a[k] + b[k]) / 2)


def test_non_float_entries_are_copied_or_rejected():
    a = {"w": torch.ones(2), "count": torch.tensor(3)}
    b = {"w": torch.zeros(2), "count": torch.tensor(3)}
    assert uniform_soup([a, b])["count"] == 3
    with pytest.raises(ValueError, match="count"):
        uniform_soup([a, {"w": torch.zeros(2), "count": torch.tensor(4)}])
    with pytest.raises(ValueError, match="different keys"):
        uniform_soup([a, {"w": torch.zeros(2)}])


def test_greedy_soup_starts_from_best_and_never_lowers_the_score():
    # 1-d "models"; the score prefers parameters close to 1.0
    states = [{"p": torch.tensor([v])} for v in (0.0, 1.2, 0.8, 5.0)]
    scores = [-abs(s["p"].item() - 1.0) for s in states]
    soup, kept = greedy_soup(states, scores, lambda s: -abs(s["p"].item() - 1.0))
    assert kept[0] in (1, 2)                 # best held-out score first
    assert 3 not in kept                     # the outlier would hurt the soup
    assert abs(soup["p"].item() - 1.0) <= min(abs(s - 1.0) for s in (1.2, 0.8)) + 1e-9


def test_mix_stacked_matches_weighted_soup_and_is_differentiable():
    sds = [_state(i) for i in range(3)]
    w = torch.tensor([0.2, 0.3, 0.5], requires_grad=True)
    mixed = mix_stacked(stack_state_dicts(sds), w)
    ref = weighted_soup(sds, [0.2, 0.3, 0.5])
    for k in mixed:
        torch.testing.assert_close(mixed[k], ref[k], rtol=1e-5, atol=1e-6)
    sum(v.sum() for v in mixed.values()).backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()
