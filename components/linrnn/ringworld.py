"""RingWorld-lite: a small POMDP where a linear filter is the agent's memory.

Our documented re-design of the paper's game (its episode length, beacon angles and most
action noise are unspecified): 12 ring positions, actions move +1/+2/-1/-2 with prob.
1 - eps (else stay), 4 beacons whose observation probability peaks at their angle, goal
positions {2, 3} (+1, episode ends), traps {6, 11, 12} (-1, episode ends), -0.01 per step,
50 steps at most. PPO is trained on fixed features of the observation history:

- ``memoryless``: the current observation only;
- ``alf_direct``: the ALF state w_k = (1 - delta) P(a) w_{k-1} + delta log e(y_k);
- ``lof_softmax``: the exact Bayes belief (softmax of the log-forward logits).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from components.common.io import save_torch, write_table
from components.common.rl import gae, ppo_loss
from components.common.seeds import seed_everything

N_POS = 12
MOVES = np.array([1, 2, -1, -2])
GOALS = np.array([1, 2])            # positions 2, 3 (1-based)
TRAPS = np.array([5, 10, 11])       # positions 6, 11, 12
STARTS = np.setdiff1d(np.arange(N_POS), np.concatenate([GOALS, TRAPS]))


def emission_matrix(sharpness: float = 2.0) -> np.ndarray:
    theta = 2 * np.pi * np.arange(N_POS) / N_POS
    phi = np.array([0.0, 0.5, 1.0, 1.5]) * np.pi
    logits = sharpness * np.cos(theta[:, None] - phi[None, :])
    return np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)


def move_permutations() -> np.ndarray:
    """P[a][i, j] = 1 iff action a moves position j to i (column convention of filters.py)."""
    P = np.zeros((len(MOVES), N_POS, N_POS))
    for a, step in enumerate(MOVES):
        P[a, (np.arange(N_POS) + step) % N_POS, np.arange(N_POS)] = 1.0
    return P


class RingWorld:
    """``n_envs`` independent copies, stepped together; auto-reset on episode end."""

    def __init__(self, n_envs: int, eps: float, episode_len: int, rng: np.random.Generator):
        self.n, self.eps, self.episode_len, self.rng = n_envs, eps, episode_len, rng
        self.E = emission_matrix()
        self.pos = rng.choice(STARTS, size=n_envs)
        self.t = np.zeros(n_envs, dtype=int)

    def observe(self) -> np.ndarray:
        cdf = np.cumsum(self.E[self.pos], axis=1)
        return (self.rng.random(self.n)[:, None] > cdf).sum(axis=1)

    def step(self, actions: np.ndarray):
        moved = (self.pos + MOVES[actions]) % N_POS
        self.pos = np.where(self.rng.random(self.n) < self.eps, self.pos, moved)
        self.t += 1
        goal, trap = np.isin(self.pos, GOALS), np.isin(self.pos, TRAPS)
        reward = -0.01 + goal * 1.0 - trap * 1.0
        done = goal | trap | (self.t >= self.episode_len)
        self.pos = np.where(done, self.rng.choice(STARTS, size=self.n), self.pos)
        self.t = np.where(done, 0, self.t)
        return reward, done, self.observe()


class FilterFeatures:
    """The memory a policy reads, updated from (action, observation) only."""

    def __init__(self, variant: str, n_envs: int, eps: float, delta: float):
        self.variant, self.eps, self.delta = variant, eps, delta
        self.logE = np.log(emission_matrix())
        self.P = move_permutations()
        self.state = np.zeros((n_envs, N_POS if variant != "memoryless" else 4))

    @property
    def dim(self) -> int:
        return self.state.shape[1]

    def _prior(self, n: int) -> np.ndarray:
        b = np.zeros((n, N_POS))
        b[:, STARTS] = 1.0 / len(STARTS)      # the start distribution is known
        return b

    def reset(self, mask: np.ndarray, y: np.ndarray) -> None:
        n = int(mask.sum())
        if self.variant == "alf_direct":
            self.state[mask] = self.delta * self.logE[:, y[mask]].T      # from w_0 = 0
        elif self.variant == "lof_softmax":
            b = self._prior(n) * np.exp(self.logE[:, y[mask]].T)
            self.state[mask] = b / b.sum(axis=1, keepdims=True)
        else:
            self.state[mask] = np.eye(4)[y[mask]]

    def update(self, actions: np.ndarray, y: np.ndarray) -> None:
        if self.variant == "memoryless":
            self.state = np.eye(4)[y]
            return
        moved = np.einsum("nij,nj->ni", self.P[actions], self.state)
        if self.variant == "alf_direct":
            self.state = (1 - self.delta) * moved + self.delta * self.logE[:, y].T
        else:  # exact Bayes: T(a) = (1 - eps) P(a) + eps I
            b = ((1 - self.eps) * moved + self.eps * self.state) * np.exp(self.logE[:, y].T)
            self.state = b / b.sum(axis=1, keepdims=True)


class ActorCritic(nn.Module):
    def __init__(self, dim: int, hidden: int, n_actions: int = len(MOVES)):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi, self.v = nn.Linear(hidden, n_actions), nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor):
        h = self.trunk(x)
        return torch.distributions.Categorical(logits=self.pi(h)), self.v(h).squeeze(-1)


def train_ppo(variant: str, seed: int, p, progress=None, log=None) -> dict:
    """PPO on fixed filter features; returns the training curve and final-return summary."""
    rng = seed_everything(seed)
    env = RingWorld(p.n_envs, p.eps, p.episode_len, rng)
    feats = FilterFeatures(variant, p.n_envs, p.eps, p.alf_delta)
    feats.reset(np.ones(p.n_envs, dtype=bool), env.observe())
    model = ActorCritic(feats.dim, p.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=p.lr)
    episode_return = np.zeros(p.n_envs)
    finished: list[tuple[int, float]] = []          # (env steps so far, episode return)
    n_updates = max(1, p.total_steps // (p.n_envs * p.rollout_len))
    for update in range(n_updates):
        batch = collect(env, feats, model, p, episode_return, finished, update)
        ppo_update(model, optimizer, batch, p)
        steps = (update + 1) * p.n_envs * p.rollout_len
        recent = [r for s, r in finished if s > steps - p.n_envs * p.rollout_len]
        if log and recent:
            log("episode_return", float(np.mean(recent)), steps)
        if progress:
            progress(update + 1, n_updates, f"{variant} seed {seed}")
    total = n_updates * p.n_envs * p.rollout_len
    tail = [r for s, r in finished if s > 0.9 * total]
    return {"model": model.state_dict(), "curve": finished,
            "final_return": float(np.mean(tail)) if tail else float("nan"), "env_steps": total}


def collect(env, feats, model, p, episode_return, finished, update) -> dict[str, torch.Tensor]:
    obs, acts, logps, vals, rews, dones = [], [], [], [], [], []
    base = update * p.n_envs * p.rollout_len
    for t in range(p.rollout_len):
        x = torch.as_tensor(feats.state, dtype=torch.float32)
        with torch.no_grad():
            dist, value = model(x)
            action = dist.sample()
        reward, done, y = env.step(action.numpy())
        episode_return += reward
        for i in np.flatnonzero(done):
            finished.append((base + (t + 1) * p.n_envs, float(episode_return[i])))
        episode_return[done] = 0.0
        feats.update(action.numpy(), y)
        feats.reset(done, y)
        obs.append(x), acts.append(action), logps.append(dist.log_prob(action)), vals.append(value)
        rews.append(torch.as_tensor(reward, dtype=torch.float32))
        dones.append(torch.as_tensor(done, dtype=torch.float32))
    with torch.no_grad():
        _, last_value = model(torch.as_tensor(feats.state, dtype=torch.float32))
    values = torch.stack(vals)
    adv, returns = gae(torch.stack(rews), values, torch.stack(dones), last_value, p.gamma, p.gae_lambda)
    flat = lambda xs: torch.stack(xs).flatten(0, 1)
    return {"obs": flat(obs), "act": flat(acts), "logp": flat(logps),
            "adv": adv.flatten(), "ret": returns.flatten()}


def ppo_update(model, optimizer, batch, p) -> None:
    n = len(batch["act"])
    size = n // p.minibatches
    for _ in range(p.ppo_epochs):
        order = torch.randperm(n)
        for start in range(0, n, size):
            idx = order[start:start + size]
            dist, value = model(batch["obs"][idx])
            loss = ppo_loss(dist.log_prob(batch["act"][idx]), batch["logp"][idx], batch["adv"][idx],
                            value, batch["ret"][idx], dist.entropy(), p.clip, entropy_coef=p.entropy_coef)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()


def train_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)   # tiny MLP: threads only add overhead, and fan-out items run in parallel
    variant, seed = ctx.item["variant"], ctx.item["seed"]
    result = train_ppo(variant, seed, cfg.ringworld, progress=ctx.progress,
                       log=lambda name, value, step: ctx.log_metric(name, value, step))
    save_torch(ctx.out_dir / "policy.pt", result["model"])
    steps, returns = zip(*result["curve"]) if result["curve"] else ((), ())
    write_table(ctx.out_dir / "episodes.parquet", {"env_step": list(steps), "return": list(returns)})
    ctx.write_metrics({"final_return": result["final_return"], "env_steps": result["env_steps"],
                       "episodes": len(returns)})
