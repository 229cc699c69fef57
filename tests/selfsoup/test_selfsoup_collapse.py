"""The label-free collapse diagnostic that inter_train reports for head-based SSL ingredients."""
import math

import torch
from torch import nn

from components.selfsoup.config import Augment
from components.selfsoup.ssl import MAE, MMCR, mean_cosine, projection_collapse
from components.selfsoup.vit import Encoder, MAEDecoder


def test_mean_cosine_is_one_for_identical_and_minus_one_over_n_minus_one_for_a_simplex():
    assert math.isclose(mean_cosine(torch.ones(5, 3)), 1.0, rel_tol=1e-12)
    # n unit vectors summing to zero (regular simplex): pairwise cosine -1/(n-1)
    n = 4
    simplex = torch.eye(n) - 1.0 / n
    assert math.isclose(mean_cosine(simplex), -1 / (n - 1), rel_tol=1e-9)


def test_projection_collapse_sees_a_constant_head_and_skips_mae():
    torch.manual_seed(0)
    encoder = Encoder(dim=16, depth=1, heads=2)
    learner = MMCR(encoder, local=True, aug=Augment())
    images = torch.rand(8, 1, 16, 16)
    before = projection_collapse(learner, images)["head_mean_cosine_val"]
    assert before < 1 - 1e-4
    with torch.no_grad():                      # a head that ignores its input: fully collapsed
        last = learner.head[-1]
        last.weight.zero_()
        last.bias.fill_(1.0)
    assert math.isclose(projection_collapse(learner, images)["head_mean_cosine_val"], 1.0, rel_tol=1e-9)
    mae = MAE(encoder, MAEDecoder(encoder.num_patches, 16, 8, 1, heads=2), 0.75)
    assert projection_collapse(mae, images) == {}
    assert isinstance(learner.head, nn.Sequential)
