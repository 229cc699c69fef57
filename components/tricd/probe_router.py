"""Router-collapse probe (v4 diagnosis, no backbone, no benchmark split): the router alone under
REINFORCE with a reward that does NOT depend on its actions (what a backbone that does not see
gives it: P1 failed in v1-v3). Any drift of the tool probabilities is then noise, not learning.
Settings as train_policy (AdamW wd 1e-4, accumulation 32, clip 1, EMA baseline 0.95, ~43 %
correct); random hidden states (64 items, 40 tokens, d 64) and random tool descriptions.
    python -m components.tricd.probe_router 2e-3,2e-4 0,1 150 [EFFECT]
Prints, per lr / tool-id setting / seed: mean tool probability, its spread across tools, and the
eval (p > 0.4) shares of items with no tool and with all eight, after every 50 updates."""
import sys

import numpy as np
import torch

from components.tricd.policy import ToolRouter, bernoulli_logp, reinforce_loss


def drift(lr: float, tool_ids: bool, seed: int, updates: int, accuracy: float = 0.43,
          effect: float = 0.0) -> list[dict]:
    """``effect`` > 0: a signal to learn instead: selecting tool 2 raises the chance of a correct
    answer by ``effect``, selecting tool 5 lowers it by ``effect`` (0 = the null reward)."""
    torch.manual_seed(seed)
    n_items, n_tools, length, d = 64, 8, 40, 64
    hidden, pad = torch.randn(n_items, length, d), torch.zeros(n_items, length, dtype=torch.bool)
    router = ToolRouter(d, 64, 16, torch.randn(n_tools, 6, d), torch.zeros(n_tools, 6, dtype=torch.bool), tool_ids)
    opt = torch.optim.AdamW(router.parameters(), lr=lr, weight_decay=1e-4)
    rng, gen, state, out = np.random.default_rng(seed), torch.Generator().manual_seed(seed), {"baseline": 0.0}, []
    for step in range(1, updates + 1):
        rows = rng.integers(0, n_items, 32)
        probs = torch.sigmoid(router(hidden[rows], pad[rows])).clamp(1e-6, 1 - 1e-6)
        actions = torch.bernoulli(probs.detach(), generator=gen)
        chance = accuracy + effect * (actions[:, 2] - actions[:, 5]).numpy()   # null: independent of actions
        reward = np.where(rng.random(32) < chance, 1.0, -1.0)
        loss = reinforce_loss(bernoulli_logp(probs, actions), reward, state, 0.95)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(router.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            with torch.no_grad():
                p = torch.sigmoid(router(hidden, pad))
            chosen = p > 0.4
            out.append({"step": step, "p_mean": float(p.mean()), "p2": float(p[:, 2].mean()), "p5": float(p[:, 5].mean()), "p_tool_spread": float(p.mean(0).std()),
                        "p_item_spread": float(p.std(0).mean()), "none": float((~chosen.any(1)).float().mean()),
                        "all": float(chosen.all(1).float().mean())})
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    lrs = [float(x) for x in sys.argv[1].split(",")]
    ids = [bool(int(x)) for x in sys.argv[2].split(",")]
    updates = int(sys.argv[3]) if len(sys.argv) > 3 else 150
    effect = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    for lr in lrs:
        for tool_ids in ids:
            for seed in (0, 1, 2):
                rows = drift(lr, tool_ids, seed, updates, effect=effect)
                print(f"lr {lr:g} tool_ids {int(tool_ids)} seed {seed}: " + "; ".join(
                    f"@{r['step']} p {r['p_mean']:.2f} p2 {r['p2']:.2f} p5 {r['p5']:.2f} tools±{r['p_tool_spread']:.3f} items±{r['p_item_spread']:.3f}"
                    f" none {r['none']:.2f} all {r['all']:.2f}" for r in rows), flush=True)
