"""Decoding error of the approximate linear filter (ALF) vs exact Bayes, by Monte Carlo.

Two-state chain (Eq. 66): the state swaps with prob. 1 - eps and stays with prob. eps;
observations are correct with prob. 0.9. Every decoder sees the same sampled paths (common
random numbers). Ties of the argmax (e.g. delta = 0 keeps w = 0) count as half an error,
the expected error of a fair coin flip.
"""
from __future__ import annotations

import numpy as np

from components.common.io import write_table
from components.common.metrics import wilson_interval
from components.common.seeds import seed_everything
from components.linrnn.filters import random_permutation_matrix, random_emissions

LLR = np.log(9.0)   # log(0.9 / 0.1)


def delta_for(schedule: str, eps: np.ndarray) -> np.ndarray:
    """The delta schedules of Eqs. 67-68 (valid: 0.7/log(1/eps), sqrt(eps))."""
    table = {
        "alf_0.7_log": lambda e: 0.7 / np.log(1 / e),
        "alf_sqrt": np.sqrt,
        "eps_sq": lambda e: e**2,          # invalid: eps/delta does not vanish
        "zero": np.zeros_like,             # invalid: no memory of observations at all
        "one": np.ones_like,               # invalid: only the last observation
    }
    return table[schedule](eps)


def decode_error(d: np.ndarray, state_is_one: np.ndarray) -> np.ndarray:
    """Per-path error: decide state 1 iff d > 0; a tie counts 0.5."""
    wrong = np.where(d > 0, ~state_is_one, state_is_one).astype(float)
    return np.where(d == 0, 0.5, wrong)


def two_state_errors(inv_eps: np.ndarray, schedules: list[str], n_paths: int, n_steps: int,
                     checkpoints: list[int], rng: np.random.Generator, progress=None) -> dict:
    """Error rates at each checkpoint, shape (len(inv_eps),) per (schedule, checkpoint)."""
    eps = 1.0 / inv_eps[:, None]
    alf = [s for s in schedules if s != "bayes"]
    deltas = {s: delta_for(s, eps) for s in alf}
    state_one = np.ones((len(inv_eps), n_paths), dtype=bool)          # pi_0 = [1, 0]
    d = {s: np.zeros_like(eps * state_one, dtype=float) for s in alf}  # w_0 = 0
    p_one = np.full(state_one.shape, 0.5)                               # Bayes LOF from l_0 = 0
    errors = {(s, k): None for s in schedules for k in checkpoints}
    for k in range(1, n_steps + 1):
        u = rng.random(state_one.shape)
        state_one = np.where(u < eps, state_one, ~state_one)            # stay w.p. eps
        correct = rng.random(state_one.shape) < 0.9
        llr = np.where(state_one == correct, LLR, -LLR)                  # +log 9 if y says "state 1"
        for s in alf:
            d[s] = -(1 - deltas[s]) * d[s] + deltas[s] * llr
        prior_one = eps * p_one + (1 - eps) * (1 - p_one)
        d_bayes = np.log(prior_one) - np.log1p(-prior_one) + llr
        p_one = 1 / (1 + np.exp(-d_bayes))
        if k in checkpoints:
            for s in alf:
                errors[(s, k)] = decode_error(d[s], state_one).mean(axis=1)
            if "bayes" in schedules:
                errors[("bayes", k)] = decode_error(d_bayes, state_one).mean(axis=1)
        if progress and k % 100 == 0:
            progress(k, n_steps, "two-state sweep")
    return errors


def sweep_two_state_stage(cfg, ctx) -> None:
    p = cfg.two_state
    rng = seed_everything(66)
    inv_eps = np.linspace(p.inv_eps_min, p.inv_eps_max, p.n_eps)
    errors = two_state_errors(inv_eps, p.schedules, p.n_paths, p.n_steps, p.checkpoints, rng, ctx.progress)
    rows = {"inv_eps": [], "schedule": [], "step": [], "error": [], "ci_low": [], "ci_high": []}
    for (schedule, step), err in errors.items():
        for x, e in zip(inv_eps, err):
            lo, hi = wilson_interval(e * p.n_paths, p.n_paths)
            for key, value in zip(rows, (float(x), schedule, step, float(e), lo, hi)):
                rows[key].append(value)
    write_table(ctx.out_dir / "sweep.parquet", rows)
    last = max(p.checkpoints)
    ctx.write_metrics({f"p{last}_{s}_inv_eps_{int(inv_eps[i])}": float(errors[(s, last)][i])
                       for s in p.schedules for i in (0, len(inv_eps) - 1)})


# --- Action-controlled chain (Thm 5.9) ----------------------------------------------------

def action_model(n: int, n_actions: int, m: int, rng: np.random.Generator):
    Ps = np.stack([random_permutation_matrix(n, rng) for _ in range(n_actions)])
    E = random_emissions(n, m, rng)
    return Ps, E


def action_errors(Ps: np.ndarray, E: np.ndarray, eps: float, n_paths: int, n_steps: int,
                  rng: np.random.Generator) -> dict[str, float]:
    """T(a) = (1 - eps) P(a) + eps U under a uniformly random policy; error at the last step
    of ALF (delta = 0.7 / log(1/eps)) and of exact Bayes."""
    n_actions, n, _ = Ps.shape
    delta = 0.7 / np.log(1 / eps)
    logE = np.log(E)
    states = rng.integers(n, size=n_paths)
    w = np.zeros((n_paths, n))
    log_b = np.full((n_paths, n), -np.log(n))
    for _ in range(n_steps):
        a = rng.integers(n_actions, size=n_paths)
        moved = Ps[a, :, states].argmax(axis=1)                      # deterministic successor
        states = np.where(rng.random(n_paths) < eps, rng.integers(n, size=n_paths), moved)
        y = (rng.random(n_paths)[:, None] > np.cumsum(E[states], axis=1)).sum(axis=1)
        # ALF: permute the memory with the action's permutation, then mix in the log-likelihood
        w = (1 - delta) * np.einsum("pij,pj->pi", Ps[a], w) + delta * logE[:, y].T
        b = np.exp(log_b)
        prior = (1 - eps) * np.einsum("pij,pj->pi", Ps[a], b) + eps / n
        log_b = np.log(prior) + logE[:, y].T
        log_b -= log_b.max(axis=1, keepdims=True)
    return {"alf": float((w.argmax(axis=1) != states).mean()),
            "bayes": float((log_b.argmax(axis=1) != states).mean())}


def sweep_action_stage(cfg, ctx) -> None:
    p = cfg.action_sweep
    rng = seed_everything(65)
    Ps, E = action_model(p.n_states, p.n_actions, p.n_obs, rng)
    rows = {"inv_eps": [], "decoder": [], "error": []}
    metrics = {}
    for i, inv in enumerate(p.inv_eps):
        result = action_errors(Ps, E, 1 / inv, p.n_paths, p.n_steps, rng)
        for decoder, err in result.items():
            rows["inv_eps"].append(inv), rows["decoder"].append(decoder), rows["error"].append(err)
            metrics[f"{decoder}_inv_eps_{int(inv)}"] = err
        ctx.progress(i + 1, len(p.inv_eps), f"action sweep 1/eps={inv}")
    write_table(ctx.out_dir / "action_sweep.parquet", rows)
    ctx.write_metrics(metrics)
