"""v4 (issue 39): router tool identity and the per-seed collapse checks."""
import numpy as np
import pytest
import torch

from components.tricd.policy import ToolRouter, collapse_stats

torch.set_num_threads(1)


def _router(tool_ids: bool, n_tools: int = 4, d: int = 16, tool_id_std: float = 1.0) -> ToolRouter:
    torch.manual_seed(0)
    same = torch.randn(1, 3, d).expand(n_tools, -1, -1).clone()      # every description alike
    return ToolRouter(d, 16, 4, same, torch.zeros(n_tools, 3, dtype=torch.bool), tool_ids, tool_id_std)


def test_identical_descriptions_leave_the_v3_router_no_per_tool_input():
    """The v1-v3 router saw a tool only through its frozen description: alike descriptions give
    exactly equal logits, so REINFORCE can only move every tool together (v3: equal per-tool
    frequencies in every seed). The tool-identity embedding (official ``tool_id_emb``) separates them."""
    hidden, pad = torch.randn(5, 7, 16), torch.zeros(5, 7, dtype=torch.bool)
    old = _router(tool_ids=False)(hidden, pad)
    assert torch.allclose(old, old[:, :1].expand_as(old))
    new = _router(tool_ids=True)(hidden, pad)
    assert new.std(1).min() > 1e-3


@pytest.mark.parametrize("tool_id_std", [1.0, 0.1])   # v4 init, v5 init
def test_router_learns_a_globally_best_tool_from_alike_descriptions(tool_id_std):
    """Regression (fails on the v3 router): one tool (index 2) is the only rewarded choice for every
    context; the router must learn it although the descriptions do not tell the tools apart."""
    from components.tricd.probe_bandit import bandit_step, router_probs

    n_tools, d = 4, 16
    router = _router(tool_ids=True, n_tools=n_tools, d=d, tool_id_std=tool_id_std)
    contexts = torch.randn(3, 5, d)
    targets = torch.nn.functional.one_hot(torch.tensor([2, 2, 2]), n_tools).float()
    opt = torch.optim.AdamW(router.parameters(), lr=1e-2)
    gen, state = torch.Generator().manual_seed(0), {"baseline": 0.0}
    for _ in range(200):
        bandit_step(router, contexts, targets, opt, gen, state)
    probs = router_probs(router, contexts)
    assert (probs[:, 2] > 0.9).all() and (probs[:, [0, 1, 3]] < 0.4).all()


def test_collapse_stats_per_seed():
    masks = np.zeros((10, 8), bool)
    masks[:6, [0, 2]] = True          # 6 items {reverse, shuffle}
    masks[6:8] = True                 # 2 items all eight
    stats = collapse_stats(masks)     # 2 items none
    assert stats == {"zero_tool_share": 0.2, "all_tools_share": 0.2, "modal_set_share": 0.6, "n_tool_sets": 3}
    assert collapse_stats(np.ones((4, 8), bool))["modal_set_share"] == 1.0


def test_report_takes_the_worst_seed_not_the_mean():
    """Regression: v3 averaged the collapse shares over seeds (two seeds all-tools, one no-tool
    read as 67 % / 33 %, under the 0.9 line); every seed collapsed."""
    from components.tricd.report import collapse_metrics

    crit = {"router_zero_tool_share_per_seed": [0.0, 0.0, 1.0],
            "router_all_tools_share_per_seed": [1.0, 1.0, 0.0],
            "router_modal_set_share_per_seed": [1.0, 1.0, 1.0]}
    out = collapse_metrics(crit, ["3", "4", "5"])
    assert out["router_zero_tool_share_max"] == 1.0 and out["router_all_tools_share_max"] == 1.0
    assert out["router_modal_set_share_max"] == 1.0 and out["router_zero_tool_share_seed5"] == 1.0


@pytest.mark.parametrize("tool_ids", [False, True])
def test_policy_state_round_trips(tool_ids):
    """evaluate rebuilds the policy from the config: the flag must give the same parameter set."""
    a, b = _router(tool_ids), _router(tool_ids)
    b.load_state_dict(a.state_dict())
    assert ("tool_id.weight" in a.state_dict()) == tool_ids
