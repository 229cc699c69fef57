"""Group advantages shared by the LM RL methods (orbit, artist)."""
import pytest
import torch

from components.common.rl import group_advantages, informative_groups


def test_group_advantages_sum_to_zero_and_rloo_uses_the_other_members():
    r = torch.tensor([[1.0, 2.0, 4.0, 7.0], [0.0, 0.0, 0.0, 0.0]])
    for kind in ("grpo", "rloo"):
        torch.testing.assert_close(group_advantages(r, kind).sum(1), torch.zeros(2), atol=1e-5, rtol=0)
    assert group_advantages(r, "rloo")[0, 0] == pytest.approx(1.0 - (2 + 4 + 7) / 3)
    grpo = group_advantages(r, "grpo")[0]
    assert grpo[3] == pytest.approx((7 - 3.5) / float(torch.tensor([1.0, 2, 4, 7]).std()), rel=1e-5)


def test_only_groups_whose_rewards_differ_are_informative():
    r = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [2.0, 2.0, 2.0]])
    assert informative_groups(r).tolist() == [False, True, False]


def test_an_unknown_advantage_kind_is_named():
    with pytest.raises(ValueError, match="'gae'"):
        group_advantages(torch.zeros(1, 2), "gae")


def test_clipped_value_error_is_the_larger_of_the_plain_and_the_clipped_error():
    from components.common.rl import ppo_loss, value_error

    old = torch.tensor([0.0, 0.0, 0.0, 1.0])
    new = torch.tensor([0.5, 0.5, 0.1, 0.6])
    target = torch.tensor([1.0, 0.0, 1.0, 0.0])
    # clipped values (clip 0.2): 0.2, 0.2, 0.1, 0.8; squared errors plain / clipped:
    # 0.25 / 0.64, 0.25 / 0.04, 0.81 / 0.81, 0.36 / 0.64 -> max 0.64, 0.25, 0.81, 0.64
    assert float(value_error(new, target)) == pytest.approx((0.25 + 0.25 + 0.81 + 0.36) / 4)
    assert float(value_error(new, target, old, clip=0.2)) == pytest.approx((0.64 + 0.25 + 0.81 + 0.64) / 4)
    # in the loss: equal log-probs and zero entropy leave only the (weighted) value term
    zeros, adv = torch.zeros(4), torch.tensor([1.0, -1.0, 1.0, -1.0])
    plain = ppo_loss(zeros, zeros, adv, new, target, zeros, value_coef=0.5)
    clipped = ppo_loss(zeros, zeros, adv, new, target, zeros, value_coef=0.5, old_values=old)
    assert float(clipped - plain) == pytest.approx(0.5 * (0.64 - 0.25 + 0.64 - 0.36) / 4, abs=1e-6)
