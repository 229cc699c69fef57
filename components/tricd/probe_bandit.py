"""The contextual bandit behind tests/tricd/test_tricd_science.py::
test_reinforce_router_learns_the_best_tool_per_context: two contexts, one rewarded tool each (every
other action set penalised). ``python -m components.tricd.probe_bandit`` runs it for seeds 0-4 at
three lr x step settings, with and without the tool-identity embedding (the v4 check)."""
import numpy as np
import torch

from components.tricd.policy import ToolRouter, bernoulli_logp, reinforce_loss

N_TOOLS, DIM = 4, 16
BEST_TOOL = {0: 1, 1: 3}          # context -> its rewarded tool


def train_bandit_router(seed: int, lr: float, steps: int, tool_ids: bool) -> torch.Tensor:
    """REINFORCE on the bandit; returns the trained router's tool probabilities per context (2, 4)."""
    torch.manual_seed(seed)
    contexts = torch.randn(2, 3, DIM)
    router = ToolRouter(DIM, 16, 4, torch.randn(N_TOOLS, 3, DIM),
                        torch.zeros(N_TOOLS, 3, dtype=torch.bool), tool_ids)
    opt = torch.optim.AdamW(router.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    state = {"baseline": 0.0}
    for _ in range(steps):
        ctx_ids = torch.randint(0, 2, (32,), generator=gen)
        probs = torch.sigmoid(router(contexts[ctx_ids], torch.zeros(32, 3, dtype=torch.bool))).clamp(1e-6, 1 - 1e-6)
        actions = torch.bernoulli(probs.detach(), generator=gen)
        target = torch.nn.functional.one_hot(torch.tensor([BEST_TOOL[int(c)] for c in ctx_ids]), N_TOOLS).float()
        reward = np.where((actions == target).all(1).numpy(), 1.0, -1.0)
        loss = reinforce_loss(bernoulli_logp(probs, actions), reward, state, 0.95)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return torch.sigmoid(router(contexts, torch.zeros(2, 3, dtype=torch.bool)))


def routes_each_context_to_its_tool(probs: torch.Tensor) -> bool:
    """Exactly the rewarded tool above the 0.4 selection threshold, and it above 0.9."""
    chosen = (probs > 0.4).float()
    return all(chosen[c].tolist() == torch.nn.functional.one_hot(torch.tensor(t), N_TOOLS).float().tolist()
               and probs[c, t] > 0.9 for c, t in BEST_TOOL.items())


if __name__ == "__main__":
    torch.set_num_threads(1)
    for lr, steps in ((1e-2, 150), (3e-3, 300), (1e-3, 400)):
        for tool_ids in (False, True):
            probs = [train_bandit_router(s, lr, steps, tool_ids) for s in range(5)]
            print(lr, steps, tool_ids, [routes_each_context_to_its_tool(p) for p in probs],
                  probs[0].numpy().round(2).tolist(), flush=True)
