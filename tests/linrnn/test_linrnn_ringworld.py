"""RingWorld: start rule, exact planning values, filter features, PPO determinism, LRU, AUC."""
from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import softmax

from components.linrnn import evaluate, filters, ppo
from components.linrnn import ringworld as rw
from components.linrnn.config import LinrnnConfig

P = LinrnnConfig().ringworld
SPEC = rw.RingSpec(P)


def test_episodes_start_at_least_three_moves_from_every_terminal():
    """The old RingWorld-lite started next to goals and traps (about 2 steps per episode)."""
    env = rw.RingWorld(SPEC, 256, np.random.default_rng(0))
    starts = [env.pos.copy()]
    for _ in range(200):
        env.step(np.random.default_rng(1).integers(4, size=256))
        starts.append(env.pos[env.t == 0])
    starts = np.unique(np.concatenate(starts))
    terminals = np.flatnonzero(SPEC.terminal)
    assert min(rw.moves_between(s, t, SPEC.n_pos) for s in starts for t in terminals) >= 3


def test_memoryless_exact_value_matches_simulation():
    """The exact Markov-chain value of a memoryless map agrees with Monte Carlo of the game."""
    policies, returns = rw.memoryless_returns(SPEC)
    rng = np.random.default_rng(3)
    for k in (int(returns.argmax()), 17):
        env = rw.RingWorld(SPEC, 4000, rng)
        running, first, y = np.zeros(4000), np.ones(4000, dtype=bool), env.observe()
        for _ in range(SPEC.episode_len):      # the first episode of each env ends by the cap
            reward, done, y = env.step(policies[k][y])
            running += reward * first
            first &= ~done
        assert not first.any()
        assert running.mean() == pytest.approx(returns[k], abs=0.04)


def test_fully_observed_optimum_bounds_every_memoryless_map():
    _, returns = rw.memoryless_returns(SPEC)
    assert rw.fully_observed_optimum(SPEC) >= returns.max()


def test_emissions_positive_and_pairwise_distinct():
    assert (SPEC.E > 0).all() and rw.min_row_distance(SPEC.E) > 0


def _column_transition(spec, a):
    """T(a)[i, j] = P(i | j, a), the column convention of filters.py."""
    return spec.transitions()[a].T


def test_lof_features_are_the_exact_bayes_logits():
    rng = np.random.default_rng(5)
    feats = rw.FilterFeatures("lof_direct", SPEC, 1, P.alf_delta)
    ys, actions = rng.integers(SPEC.n_obs, size=30), rng.integers(4, size=29)
    feats.reset(np.ones(1, dtype=bool), ys[:1])
    logE = np.log(SPEC.E)
    # from l_0 = 0 the first observation gives l_1 = log e(y_1); then the exact recursion
    l_ref = filters.log_forward(None, logE, logE[:, ys[0]], ys[1:],
                                log_Ts=[np.log(_column_transition(SPEC, a)) for a in actions])
    for k, (a, y) in enumerate(zip(actions, ys[1:])):
        feats.update(np.array([a]), np.array([y]))
        np.testing.assert_allclose(feats.memory[0], l_ref[k], rtol=1e-12, atol=1e-9)
    soft = rw.FilterFeatures("lof_softmax", SPEC, 1, P.alf_delta)
    soft.memory = feats.memory.copy()
    np.testing.assert_allclose(soft.state[0], softmax(l_ref[-1]), atol=1e-12)


def test_alf_features_follow_the_permuted_recursion():
    rng = np.random.default_rng(6)
    delta, logE = 0.1, np.log(SPEC.E)
    feats = rw.FilterFeatures("alf_direct", SPEC, 1, delta)
    y = rng.integers(SPEC.n_obs, size=20)
    feats.reset(np.ones(1, dtype=bool), y[:1])
    w = delta * logE[:, y[0]]
    for k in range(1, 20):
        a = int(rng.integers(4))
        Pa = (_column_transition(SPEC, a) > 0.5).astype(float)   # the deterministic part P(a)
        w = (1 - delta) * Pa @ w + delta * logE[:, y[k]]
        feats.update(np.array([a]), y[k:k + 1])
        np.testing.assert_allclose(feats.memory[0], w, atol=1e-12)


def test_training_is_deterministic_with_runs_in_parallel_threads():
    """Fan-out items share a process under the threads executor: a run must not draw from a
    generator another run also draws from (the old code sampled from torch's global one)."""
    small = P.model_copy(update={"total_steps": 2048, "n_envs": 16, "variants": ["memoryless"]})
    solo = ppo.train_ppo("alf_direct", 0, small)["curve"]
    results = {}

    def run(key, variant, seed):
        results[key] = ppo.train_ppo(variant, seed, small)["curve"]

    threads = [threading.Thread(target=run, args=("a", "alf_direct", 0)),
               threading.Thread(target=run, args=("b", "lof_softmax", 1)),
               threading.Thread(target=run, args=("c", "alf_direct", 0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a"] == solo and results["c"] == solo


def test_lru_is_stable_and_resets_at_episode_start():
    rng = np.random.default_rng(0)
    model = ppo.RecurrentPolicy(in_dim=8, size=12, head_class=ppo.MLPHead, hidden=16, rng=rng)
    ppo.init_parameters(model, rng)
    radius = torch.exp(-torch.exp(model.rnn.nu_log))
    assert bool((radius < 1).all())
    xs = torch.randn(6, 3, 8)
    starts = torch.zeros(6, 3)
    starts[3] = 1.0
    h0 = torch.randn(3, model.state_size)
    logits, values = model.sequence(xs, h0, starts)
    restart = torch.zeros(3, 3)
    restart[0] = 1.0
    later, _ = model.sequence(xs[3:], torch.randn(3, model.state_size), restart)
    torch.testing.assert_close(logits[3:], later)       # nothing before a start leaks through
    step_logits, _, _ = model.step(xs[0], h0, starts[0])
    torch.testing.assert_close(logits[0], step_logits)


def test_area_under_curve_is_the_mean_of_bin_means():
    episodes = pd.DataFrame({"env_step": [10, 20, 60, 70, 80], "return": [0.0, 1.0, 1.0, 1.0, 0.0]})
    assert evaluate.area_under_curve(episodes, total_steps=100, n_bins=2) == pytest.approx((0.5 + 2 / 3) / 2)
    with pytest.raises(ValueError):
        evaluate.area_under_curve(episodes, total_steps=100, n_bins=5)


def test_lof_direct_logits_drift_and_alf_stays_bounded():
    """The paper's point about direct features: Bayes logits grow with k, ALF's do not."""
    rng = np.random.default_rng(2)
    env = rw.RingWorld(SPEC, 64, rng)
    lof = rw.FilterFeatures("lof_direct", SPEC, 64, 0.1)
    alf = rw.FilterFeatures("alf_direct", SPEC, 64, 0.1)
    y = env.observe()
    for f in (lof, alf):
        f.reset(np.ones(64, dtype=bool), y)
    for _ in range(40):
        a = rng.integers(4, size=64)
        y = (rng.random(64)[:, None] > np.cumsum(SPEC.E[env.pos], axis=1)).sum(axis=1)
        lof.update(a, y), alf.update(a, y)
    assert np.abs(lof.memory).max() > 30
    assert np.abs(alf.memory).max() <= np.abs(np.log(SPEC.E)).max()
