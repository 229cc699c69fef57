"""Calibration v13 (issue 39): the per-query ``base_answer`` REINFORCE baseline."""
import numpy as np
import pytest
import torch

from components.tricd.config import TricdConfig
from components.tricd.policy import policy_loss, reinforce_loss


def _policy_cfg(**over):
    return TricdConfig.for_profile("small", overrides={"policy": over}).policy


def test_per_query_baseline_gives_gradient_only_where_decoding_changed_the_answer():
    """Rows 0 and 1 were right (wrong) before and after decoding: no advantage, whatever the
    EMA says. Row 2 was fixed by decoding (+2), row 3 broken by it (-2)."""
    logp = torch.zeros(4, requires_grad=True)
    reward, base = np.array([1.0, -1.0, 1.0, -1.0]), np.array([1.0, -1.0, -1.0, 1.0])
    state = {"baseline": 0.3}
    reinforce_loss(logp, reward, state, 0.95, per_query=base).backward()
    np.testing.assert_allclose(logp.grad.numpy(), -np.array([0.0, 0.0, 2.0, -2.0]) / 4)
    assert state["baseline"] != 0.3            # the EMA is still tracked for the log


def test_ema_baseline_pushes_unchanged_answers():
    """The official EMA baseline: the same rows get a non-zero advantage from difficulty alone."""
    logp = torch.zeros(4, requires_grad=True)
    reinforce_loss(logp, np.array([1.0, -1.0, 1.0, -1.0]), {"baseline": 0.0}, 0.95).backward()
    assert (logp.grad[:2].abs() > 0.1).all()


def test_policy_loss_selects_the_baseline_and_names_bad_values():
    logp, probs = torch.zeros(2, requires_grad=True), torch.full((2, 8), 0.5)
    reward, base = np.array([1.0, -1.0]), np.array([1.0, -1.0])
    policy_loss(logp, probs, reward, {"baseline": 0.0}, _policy_cfg(baseline="base_answer"), base).backward()
    assert torch.count_nonzero(logp.grad) == 0
    with pytest.raises(ValueError, match="policy.baseline"):   # rejected when the config loads
        _policy_cfg(baseline="greedy")
    with pytest.raises(ValueError, match="base_answer"):
        policy_loss(logp, probs, reward, {"baseline": 0.0}, _policy_cfg(baseline="base_answer"))


def test_default_baseline_is_the_official_ema():
    assert TricdConfig.for_profile("small").policy.baseline == "ema"
    assert TricdConfig.for_profile("paper").policy.baseline == "ema"
