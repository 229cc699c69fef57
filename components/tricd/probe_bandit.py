"""v4 bandit check behind tests/tricd/test_tricd_science.py::test_reinforce_router_learns_the_best_tool_per_context:
the same procedure for seeds 0-4, three lr x step settings, with and without the tool-identity embedding."""
import numpy as np, torch, sys
from components.tricd.policy import ToolRouter, bernoulli_logp, reinforce_loss
torch.set_num_threads(1)
def run(seed, lr, steps, tool_ids):
    torch.manual_seed(seed)
    n_tools, d = 4, 16
    contexts = torch.randn(2, 3, d)
    router = ToolRouter(d, 16, 4, torch.randn(n_tools, 3, d), torch.zeros(n_tools, 3, dtype=torch.bool), tool_ids)
    opt = torch.optim.AdamW(router.parameters(), lr=lr)
    best = {0: 1, 1: 3}
    gen = torch.Generator().manual_seed(seed)
    state = {"baseline": 0.0}
    for _ in range(steps):
        ctx_ids = torch.randint(0, 2, (32,), generator=gen)
        probs = torch.sigmoid(router(contexts[ctx_ids], torch.zeros(32, 3, dtype=torch.bool))).clamp(1e-6, 1 - 1e-6)
        actions = torch.bernoulli(probs.detach(), generator=gen)
        target = torch.nn.functional.one_hot(torch.tensor([best[int(c)] for c in ctx_ids]), n_tools).float()
        reward = np.where((actions == target).all(1).numpy(), 1.0, -1.0)
        loss = reinforce_loss(bernoulli_logp(probs, actions), reward, state, 0.95)
        opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        probs = torch.sigmoid(router(contexts, torch.zeros(2, 3, dtype=torch.bool)))
    ok = all(((probs[c] > 0.4).float().tolist() == torch.nn.functional.one_hot(torch.tensor(t), n_tools).float().tolist()) and probs[c, t] > 0.9 for c, t in best.items())
    return ok, probs.numpy().round(2).tolist()
for lr, steps in ((1e-2, 150), (3e-3, 300), (1e-3, 400)):
    for tid in (False, True):
        res = [run(s, lr, steps, tid) for s in range(5)]
        print(lr, steps, tid, [r[0] for r in res], res[0][1], flush=True)
