"""RingWorld: a small POMDP where a linear filter is the agent's memory.

Our documented re-design of the paper's game (its episode length, beacon angles, start rule
and most action noise are unspecified). ``n_pos`` positions on a ring; actions move
+1/+2/-1/-2 with prob. 1 - eps and stay otherwise; beacons at fixed angles emit
P(o = b | s) ∝ exp(sharpness · cos(θ_s − φ_b)) (strictly positive, pairwise-distinct columns,
so Assumption 5.8 holds); +1 on entering a goal, -1 on entering a trap (both end the
episode), -0.01 per step, ``episode_len`` steps at most. Episodes start uniformly on the
positions at least ``min_start_moves`` moves from every goal and trap.

This module holds the game, its exact planning values (the premise: how much a memoryless
policy loses against the fully observed optimum) and the fixed filter features a policy can
read. Positions are 0-based.
"""
from __future__ import annotations

import itertools

import numpy as np

from components.linrnn.config import FILTER_VARIANTS

MOVES = np.array([1, 2, -1, -2])


def moves_between(a: int, b: int, n_pos: int) -> int:
    """Fewest moves of at most 2 positions from a to b on the ring (terminals not avoided)."""
    d = (a - b) % n_pos
    return int(np.ceil(min(d, n_pos - d) / 2))


class RingSpec:
    """The static description of one RingWorld (read from the ``ringworld`` params)."""

    def __init__(self, p):
        self.n_pos, self.eps, self.episode_len = p.n_pos, p.eps, p.episode_len
        self.goals, self.traps = np.array(p.goals), np.array(p.traps)
        self.terminal = np.zeros(self.n_pos, dtype=bool)
        self.terminal[np.concatenate([self.goals, self.traps])] = True
        self.reward = np.full(self.n_pos, -0.01)
        self.reward[self.goals] += 1.0
        self.reward[self.traps] -= 1.0
        self.starts = np.array([s for s in range(self.n_pos) if not self.terminal[s] and all(
            moves_between(s, t, self.n_pos) >= p.min_start_moves for t in np.flatnonzero(self.terminal))])
        if len(self.starts) == 0:
            raise ValueError(f"no position is {p.min_start_moves} moves from every goal and trap")
        self.E = emission_matrix(self.n_pos, p.beacon_deg, p.sharpness)
        self.n_obs = self.E.shape[1]

    def min_start_moves(self) -> int:
        return min(moves_between(s, t, self.n_pos) for s in self.starts for t in np.flatnonzero(self.terminal))

    def transitions(self) -> np.ndarray:
        """T[a, s, s'] = P(s' | s, a) (row convention, for planning)."""
        T = np.zeros((len(MOVES), self.n_pos, self.n_pos))
        s = np.arange(self.n_pos)
        for a, step in enumerate(MOVES):
            T[a, s, (s + step) % self.n_pos] += 1 - self.eps
            T[a, s, s] += self.eps
        return T


def emission_matrix(n_pos: int, beacon_deg: list[float], sharpness: float) -> np.ndarray:
    theta = 2 * np.pi * np.arange(n_pos) / n_pos
    phi = np.deg2rad(np.asarray(beacon_deg, dtype=float))
    logits = sharpness * np.cos(theta[:, None] - phi[None, :])
    return np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)


# --- Exact planning values (the premise) --------------------------------------------------

def fully_observed_optimum(spec: RingSpec) -> float:
    """Mean over starts of the optimal finite-horizon return when the position is seen."""
    T, gain = spec.transitions(), np.zeros(spec.n_pos)
    for _ in range(spec.episode_len):
        gain = np.einsum("asn,n->as", T, spec.reward + ~spec.terminal * gain).max(axis=0)
    return float(gain[spec.starts].mean())


def memoryless_returns(spec: RingSpec) -> tuple[np.ndarray, np.ndarray]:
    """Exact expected return of every deterministic observation -> action map (all
    4^n_obs of them): the position process under such a map is a Markov chain."""
    T = spec.transitions()
    policies = np.array(list(itertools.product(range(len(MOVES)), repeat=spec.n_obs)))
    chain = sum(spec.E[None, :, o, None] * T[policies[:, o]] for o in range(spec.n_obs))
    gain = np.zeros((len(policies), spec.n_pos))
    for _ in range(spec.episode_len):
        gain = np.einsum("psn,pn->ps", chain, spec.reward[None] + ~spec.terminal[None] * gain)
    return policies, gain[:, spec.starts].mean(axis=1)


def premise_values(spec: RingSpec) -> dict[str, float]:
    policies, returns = memoryless_returns(spec)
    best = int(returns.argmax())
    full = fully_observed_optimum(spec)
    return {"fully_observed_return": full, "best_memoryless_return": float(returns[best]),
            "memory_gap": full - float(returns[best]), "n_starts": len(spec.starts),
            "min_start_moves": spec.min_start_moves(),
            "min_emission_row_distance": min_row_distance(spec.E),
            **{f"best_memoryless_action_obs{o}": int(a) for o, a in enumerate(policies[best])}}


def min_row_distance(E: np.ndarray) -> float:
    """Smallest L1 distance between two positions' observation distributions (> 0: the
    pairwise-distinct columns of Assumption 5.8)."""
    gaps = np.abs(E[:, None, :] - E[None, :, :]).sum(axis=2)
    return float(gaps[~np.eye(len(E), dtype=bool)].min())


def premise_stage(cfg, ctx) -> None:
    from components.common.io import write_json_atomic

    values = premise_values(RingSpec(cfg.ringworld))
    write_json_atomic(ctx.out_dir / "premise.json", values)
    ctx.write_metrics(values)


# --- The game ------------------------------------------------------------------------------

class RingWorld:
    """``n_envs`` independent copies, stepped together; auto-reset on episode end."""

    def __init__(self, spec: RingSpec, n_envs: int, rng: np.random.Generator):
        self.spec, self.n, self.rng = spec, n_envs, rng
        self.cdf = np.cumsum(spec.E, axis=1)
        self.pos = rng.choice(spec.starts, size=n_envs)
        self.t = np.zeros(n_envs, dtype=int)

    def observe(self) -> np.ndarray:
        return np.minimum((self.rng.random(self.n)[:, None] > self.cdf[self.pos]).sum(axis=1),
                          self.spec.n_obs - 1)

    def step(self, actions: np.ndarray):
        s = self.spec
        moved = (self.pos + MOVES[actions]) % s.n_pos
        self.pos = np.where(self.rng.random(self.n) < s.eps, self.pos, moved)
        self.t += 1
        reward = s.reward[self.pos]
        done = s.terminal[self.pos] | (self.t >= s.episode_len)
        self.pos = np.where(done, self.rng.choice(s.starts, size=self.n), self.pos)
        self.t = np.where(done, 0, self.t)
        return reward, done, self.observe()


# --- Fixed filter features -----------------------------------------------------------------

def softmax_rows(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


class FilterFeatures:
    """The memory a policy reads, updated from (action, observation) only.

    Both filters start from l_0 = w_0 = 0, as in the paper's section 6.1.
    - LOF: exact Bayes log-forward logits for T(a) = (1 - eps) P(a) + eps I,
      l_k(i) = log e(y_k)_i + logaddexp(log(1-eps) + l_{k-1}(i - m_a), log(eps) + l_{k-1}(i)).
      "direct" reads the raw logits, which drift like k · E[log e(y)]; "softmax" the belief.
    - ALF: w_k(i) = (1 - delta) w_{k-1}(i - m_a) + delta log e(y_k)_i.
    """

    def __init__(self, variant: str, spec: RingSpec, n_envs: int, delta: float):
        if variant not in FILTER_VARIANTS:
            raise ValueError(f"unknown filter variant {variant!r}")
        self.variant, self.spec, self.delta = variant, spec, delta
        self.logE = np.log(spec.E)
        self.filter = "lof" if variant.startswith("lof") else "alf" if variant.startswith("alf") else None
        self.memory = np.zeros((n_envs, spec.n_pos))
        self.obs = np.zeros(n_envs, dtype=int)

    @property
    def dim(self) -> int:
        return self.spec.n_obs if self.filter is None else self.spec.n_pos

    @property
    def state(self) -> np.ndarray:
        if self.filter is None:
            return np.eye(self.spec.n_obs)[self.obs]
        return softmax_rows(self.memory) if self.variant.endswith("softmax") else self.memory

    def _evidence(self, y: np.ndarray) -> np.ndarray:
        return self.logE[:, y].T

    def reset(self, mask: np.ndarray, y: np.ndarray) -> None:
        """Episode start: one observation on top of the zero initial state."""
        self.obs[mask] = y[mask]
        scale = self.delta if self.filter == "alf" else 1.0
        self.memory[mask] = scale * self._evidence(y[mask])

    def update(self, actions: np.ndarray, y: np.ndarray) -> None:
        self.obs = y.copy()
        if self.filter is None:
            return
        n_pos = self.spec.n_pos
        source = (np.arange(n_pos)[None, :] - MOVES[actions][:, None]) % n_pos
        moved = np.take_along_axis(self.memory, source, axis=1)       # (P(a) l)_i = l_{i - m_a}
        if self.filter == "alf":
            self.memory = (1 - self.delta) * moved + self.delta * self._evidence(y)
        else:
            eps = self.spec.eps
            self.memory = self._evidence(y) + np.logaddexp(np.log1p(-eps) + moved, np.log(eps) + self.memory)
