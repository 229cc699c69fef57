"""The contextual bandits behind the router tests (tests/tricd/test_tricd_science.py::
test_reinforce_router_learns_the_best_tool_per_context and tests/tricd/test_tricd_v4.py): REINFORCE
on ToolRouter with the EMA baseline, one rewarded tool set per context, every other set penalised.
``python -m components.tricd.probe_bandit`` runs the per-context bandit for seeds 0-4 at three lr x
step settings with and without the tool-identity embedding (v4), and at several init scales of that
embedding (v5)."""
import sys

import numpy as np
import torch

from components.tricd.policy import ToolRouter, bernoulli_logp, reinforce_loss

N_TOOLS, DIM = 4, 16
BEST_TOOL = {0: 1, 1: 3}          # context -> its rewarded tool


def bandit_step(router: ToolRouter, contexts: torch.Tensor, targets: torch.Tensor, opt,
                gen: torch.Generator, state: dict, batch: int = 32) -> None:
    """One REINFORCE update: draw ``batch`` contexts, sample Bernoulli tool sets, reward +1 when
    the set equals the context's target set (``targets`` (n_contexts, n_tools) 0/1), else -1."""
    ids = torch.randint(0, len(contexts), (batch,), generator=gen)
    pad = torch.zeros(batch, contexts.shape[1], dtype=torch.bool)
    probs = torch.sigmoid(router(contexts[ids], pad)).clamp(1e-6, 1 - 1e-6)
    actions = torch.bernoulli(probs.detach(), generator=gen)
    reward = np.where((actions == targets[ids]).all(1).numpy(), 1.0, -1.0)
    loss = reinforce_loss(bernoulli_logp(probs, actions), reward, state, 0.95)
    opt.zero_grad()
    loss.backward()
    opt.step()


@torch.no_grad()
def router_probs(router: ToolRouter, contexts: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(router(contexts, torch.zeros(contexts.shape[:2], dtype=torch.bool)))


def train_bandit_router(seed: int, lr: float, steps: int, tool_ids: bool,
                        tool_id_std: float = 1.0) -> torch.Tensor:
    """REINFORCE on the per-context bandit; returns the trained router's tool probabilities per
    context (2, 4)."""
    torch.manual_seed(seed)
    contexts = torch.randn(2, 3, DIM)
    router = ToolRouter(DIM, 16, 4, torch.randn(N_TOOLS, 3, DIM),
                        torch.zeros(N_TOOLS, 3, dtype=torch.bool), tool_ids, tool_id_std)
    targets = torch.nn.functional.one_hot(torch.tensor([BEST_TOOL[c] for c in range(2)]), N_TOOLS).float()
    opt = torch.optim.AdamW(router.parameters(), lr=lr)
    gen, state = torch.Generator().manual_seed(seed), {"baseline": 0.0}
    for _ in range(steps):
        bandit_step(router, contexts, targets, opt, gen, state)
    return router_probs(router, contexts)


def routes_each_context_to_its_tool(probs: torch.Tensor) -> bool:
    """Exactly the rewarded tool above the 0.4 selection threshold, and it above 0.9."""
    chosen = (probs > 0.4).float()
    return all(chosen[c].tolist() == torch.nn.functional.one_hot(torch.tensor(t), N_TOOLS).float().tolist()
               and probs[c, t] > 0.9 for c, t in BEST_TOOL.items())


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1:2] == ["--std"]:   # v5: init scale of the tool-identity embedding, lr 1e-3 x 400
        for std in [float(s) for s in sys.argv[2].split(",")]:
            probs = [train_bandit_router(s, 1e-3, 400, True, std) for s in range(5)]
            print("std", std, [routes_each_context_to_its_tool(p) for p in probs],
                  probs[0].numpy().round(2).tolist(), flush=True)
    else:
        for lr, steps in ((1e-2, 150), (3e-3, 300), (1e-3, 400)):
            for tool_ids in (False, True):
                probs = [train_bandit_router(s, lr, steps, tool_ids) for s in range(5)]
                print(lr, steps, tool_ids, [routes_each_context_to_its_tool(p) for p in probs],
                      probs[0].numpy().round(2).tolist(), flush=True)
