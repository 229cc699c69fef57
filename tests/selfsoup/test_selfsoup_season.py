"""Self-seasoning: mixing weights are a distribution, learned from images only."""
import inspect

import torch

from components.selfsoup.config import Season
from components.selfsoup.season import learn_mixing_weights
from components.selfsoup.vit import Encoder


def _encoders(n):
    states = []
    for i in range(n):
        torch.manual_seed(i)
        states.append(Encoder(dim=16, depth=1, heads=2).state_dict())
    return states


def test_weights_sum_to_one_and_are_learned_without_labels():
    assert "labels" not in inspect.signature(learn_mixing_weights).parameters
    torch.manual_seed(0)
    images = torch.rand(64, 1, 16, 16)
    s = Season(epochs=3, batch=32)
    weights, history = learn_mixing_weights(Encoder(dim=16, depth=1, heads=2), _encoders(3), images, s)
    assert weights.shape == (3,) and (weights >= 0).all()
    assert abs(weights.sum().item() - 1) < 1e-6
    assert len(history) == 3 and all(torch.isfinite(torch.tensor(history)))
    assert not torch.allclose(weights, torch.full((3,), 1 / 3))   # the weights did move


def test_identical_ingredients_give_the_same_soup_whatever_the_weights():
    from components.common.soups import weighted_soup
    sd = _encoders(1)[0]
    torch.manual_seed(0)
    weights, _ = learn_mixing_weights(Encoder(dim=16, depth=1, heads=2), [sd, sd], torch.rand(32, 1, 16, 16),
                                      Season(epochs=1, batch=16))
    soup = weighted_soup([sd, sd], weights.tolist())
    for k in sd:
        torch.testing.assert_close(soup[k], sd[k], rtol=0, atol=1e-6)
