"""Unit tests of the anompi science: DPO loss, operators, the analytic bound, weak supervision."""
import math

import numpy as np
import pytest
import torch

from components.anompi.bound import passive_bound
from components.anompi.config import CLASSES, AnompiConfig
from components.anompi.env import ActiveEnv, anchors, uniform_frames
from components.anompi.perception import BeliefHead, motion_mask
from components.anompi.policy import (PolicyNet, aei_utility, dpo_loss, preference_pairs,
                                      run_episodes, stack_features, trajectory_logp)
from components.anompi.video import RUN_SPEED, make_specs, trajectories

torch.set_num_threads(1)


def tiny_env(n=6, T=64, seed=0, **policy):
    cfg = AnompiConfig.for_profile("smoke", {"policy": policy} if policy else None)
    g = torch.Generator().manual_seed(seed)
    d = 8
    cache = {"emb_static": torch.randn(n, T, d, generator=g).half(),
             "emb_motion": torch.randn(n, T, d, generator=g).half(),
             "sal_static": torch.rand(n, T, generator=g).half(),
             "sal_motion": torch.rand(n, T, generator=g).half()}
    torch.manual_seed(seed)
    return ActiveEnv(cache, BeliefHead(d, 16).eval(), cfg.policy), cfg


# -- iDPO -----------------------------------------------------------------------------------------
def test_dpo_loss_is_log2_when_policy_equals_reference():
    lp = torch.tensor([-3.0, -1.2, -7.5])
    assert dpo_loss(lp, lp - 1, lp, lp - 1, beta=0.5).item() == pytest.approx(math.log(2))


def test_dpo_loss_closed_form_on_fixed_log_probs():
    pi_w, pi_l = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    ref_w, ref_l = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])
    beta = 0.5
    # margins: ((-1+2) - (-3+2)) = 2 ; ((-2+2) - (-1+2)) = -1
    expected = np.mean([-math.log(1 / (1 + math.exp(-beta * 2))), -math.log(1 / (1 + math.exp(beta)))])
    assert dpo_loss(pi_w, pi_l, ref_w, ref_l, beta).item() == pytest.approx(expected, rel=1e-6)


def test_dpo_gradient_raises_winner_log_ratio():
    pi_w = torch.tensor([-2.0], requires_grad=True)
    pi_l = torch.tensor([-2.0], requires_grad=True)
    dpo_loss(pi_w, pi_l, torch.tensor([-2.0]), torch.tensor([-2.0]), beta=1.0).backward()
    assert pi_w.grad.item() < 0 < pi_l.grad.item()       # descent raises pi_w, lowers pi_l


def test_aei_utility_and_pairs():
    u = aei_utility([1, 0, 1], [0.5, 0.0, 0.0], [24, 8, 8], n_init=8, budget=16,
                    lambda_info=0.2, lambda_cost=0.5)
    np.testing.assert_allclose(u, [1 + 0.1 - 0.5, 0.0, 1.0])



def test_pairing_rule_matches_success_at_equal_cost_and_cost_at_equal_success():
    # video 0: two correct (8 and 20 frames), two wrong (20 and 9 frames)
    # video 1: both correct, utilities 0.02 apart (under the margin): no pair
    video = np.array([0, 0, 0, 0, 1, 1])
    correct = np.array([1, 1, 0, 0, 1, 1])
    frames = np.array([8, 20, 20, 9, 12, 12])
    util = aei_utility(correct, np.zeros(6), frames, n_init=8, budget=24,
                       lambda_info=0.0, lambda_cost=0.5)
    util[5] += 0.02
    pairs = preference_pairs(video, util, correct, frames, margin=0.05, outcome_pairs=2,
                             cost_groups=("correct", "wrong"))
    # outcome pairs: the best correct (8 frames) meets the wrong one nearest in frames (9), then
    # the other correct (20) meets the other wrong (20); cost pairs: the cheaper of each group
    assert pairs == [(0, 3, "outcome"), (1, 2, "outcome"), (0, 1, "cost"), (3, 2, "cost")]
    assert all(util[w] - util[l] > 0.05 for w, l, _ in pairs)
    only_correct = preference_pairs(video, util, correct, frames, margin=0.05, outcome_pairs=1,
                                    cost_groups=("correct",))
    assert only_correct == [(0, 3, "outcome"), (0, 1, "cost")]


# -- operators ------------------------------------------------------------------------------------
def test_operators_return_the_frames_they_claim():
    env, cfg = tiny_env(n=4, T=64, n_anchors=4, fine_len=4, max_steps=4, budget=40)
    st = env.reset(torch.arange(4))
    assert st.obs.sum(1).tolist() == [4] * 4
    assert torch.nonzero(st.obs[0]).squeeze(1).tolist() == anchors(64, 4).tolist() == [8, 24, 40, 56]
    tg = env.targets(st)
    assert tg[0, 1].tolist() == [22, 23, 24, 25]                  # FINE(1): window holding anchor 1
    valid = env.valid(st, tg)
    assert not valid[:, 4:10].any()                               # relative operators need a focus
    st2 = env.step(st, torch.tensor([1, 1, 1, env.ANSWER]), tg)
    assert set(torch.nonzero(st2.obs[0]).squeeze(1).tolist()) == {8, 22, 23, 24, 25, 40, 56}
    assert st2.focus[0].item() == 22 and st2.done.tolist() == [False, False, False, True]
    assert st2.obs[3].sum().item() == 4 and st2.steps[3].item() == 0   # ANSWER acquires nothing
    tg2 = env.targets(st2)
    names = env.names
    assert tg2[0, names.index("backtrack_1")].tolist() == [18, 19, 20, 21]
    assert tg2[0, names.index("backtrack_2")].tolist() == [14, 15, 16, 17]
    assert tg2[0, names.index("advance_1")].tolist() == [26, 27, 28, 29]
    assert tg2[0, names.index("expand")].tolist() == [18, 20, 27, 29]   # sparse, around the span
    st3 = env.step(st2, torch.full((4,), names.index("backtrack_1")), tg2)
    new = st3.obs[0] & ~st2.obs[0]
    assert torch.nonzero(new).squeeze(1).tolist() == [18, 19, 20, 21]
    assert st3.focus[0].item() == 18
    # motion clips exist exactly where two consecutive frames are observed
    assert motion_mask(st3.obs)[0].nonzero().squeeze(1).tolist() == [19, 20, 21, 22, 23, 24, 25]


def test_backtrack_clipped_at_frame_zero_keeps_a_focus():
    """Bug fix: a BACKTRACK whose window starts before frame 0 set the focus to -1 (the first,
    out-of-range target), which disabled every relative operator afterwards."""
    env, _ = tiny_env(n=1, T=64, n_anchors=4, fine_len=4, max_steps=4, budget=40)
    st = env.reset(torch.arange(1))
    tg = env.targets(st)
    st = env.step(st, torch.tensor([0]), tg)                      # FINE(0): frames 6..9
    tg = env.targets(st)
    back2 = env.names.index("backtrack_2")
    assert tg[0, back2].tolist() == [-1, -1, 0, 1]                # clipped at frame 0
    st = env.step(st, torch.tensor([back2]), tg)
    assert st.focus[0].item() == 0 and (st.span_lo[0].item(), st.span_hi[0].item()) == (0, 2)
    tg = env.targets(st)
    valid = env.valid(st, tg)
    assert valid[0, env.names.index("advance_1")]                 # relative operators still work
    assert tg[0, env.names.index("advance_1")].tolist() == [4, 5, 6, 7]


def test_budget_and_step_limit_are_enforced():
    env, _ = tiny_env(n=5, T=64, n_anchors=4, fine_len=4, max_steps=3, budget=14)
    res = run_episodes(env, torch.arange(5), PolicyNet(16), mode="sample", epsilon=1.0,
                       generator=torch.Generator().manual_seed(0))
    assert (res["frames"] <= 14).all() and (res["steps"] <= 3).all()
    assert (res["obs"].sum(1) == res["frames"]).all()


def test_replay_reproduces_frames_and_forced_steps_carry_no_log_prob():
    env, _ = tiny_env(n=8, T=64, n_anchors=4, fine_len=4, max_steps=2, budget=40)
    policy = PolicyNet(16)
    vid = torch.arange(8)
    res = run_episodes(env, vid, policy, mode="sample", epsilon=0.5,
                       generator=torch.Generator().manual_seed(3))
    again = run_episodes(env, vid, mode="replay", actions=res["actions"], keep_features=True)
    assert torch.equal(again["obs"], res["obs"]) and torch.equal(again["pred"], res["pred"])
    act, glob, valid, chosen = stack_features(env, again["features"], res["actions"])
    forced = (res["actions"] >= 0) & (valid.sum(-1) == 1)
    assert not chosen[forced].any()
    # after max_steps operator calls only ANSWER is valid: that step is forced
    full = res["steps"] == 2
    assert forced[full, 2].all()
    lp = trajectory_logp(policy, act, glob, valid, res["actions"], chosen)
    assert torch.isfinite(lp).all() and (lp <= 0).all()


# -- the environment and the analytic bound -------------------------------------------------------
def test_running_event_moves_fast_only_inside_the_window():
    cfg = AnompiConfig.for_profile("small")
    rng = np.random.default_rng(1)
    specs = make_specs(200, cfg.env, rng)
    i = int(np.flatnonzero((specs["label"] == CLASSES.index("running")) & specs["has_actor"])[0])
    row = {k: specs[k][i] for k in specs} | {"walkers": (0, 0)}
    pos, _, inten = trajectories(row, cfg.env.n_frames, cfg.env.size, np.random.default_rng(5))
    actor = pos[:, 0]
    step = np.linalg.norm(np.diff(actor, axis=0), axis=1)
    e, w, a = specs["event_start"][i], specs["event_len"][i], specs["actor_start"][i]
    inside = step[e:e + w - 1]
    before = step[a:e - 1]
    assert before.max() <= 0.61 and np.median(inside) > 0.6 * RUN_SPEED


def test_analytic_bound_matches_monte_carlo_ideal_observer():
    cfg = AnompiConfig.for_profile("small")
    env = cfg.env
    T, k = env.n_frames, 16
    frames = uniform_frames(T, k)
    exact = passive_bound(T, frames, env.actor_len, env.event_len, env.distractor_rate)
    specs = make_specs(60_000, env, np.random.default_rng(7))
    g = np.zeros(T + 1, bool)
    g[frames] = True
    cg = np.concatenate([[0], np.cumsum(g[:T])])
    a, L, e, w = specs["actor_start"], specs["actor_len"], specs["event_start"], specs["event_len"]
    seen_actor = ((cg[a + L] - cg[a]) > 0) & specs["has_actor"]
    single = (cg[e + w] - cg[e]) > 0
    assert np.mean(single) == pytest.approx(exact["single"], abs=0.01)
    # ideal observer decisions: motion classes are never resolved by a sparse grid
    y = specs["label"]
    static = np.isin(y, [CLASSES.index("falling"), CLASSES.index("object_left")])
    correct = np.where(~seen_actor, y == 0,
                       np.where(static & single, True, y == CLASSES.index("running")))
    assert np.mean(correct) == pytest.approx(exact["accuracy"], abs=0.01)


def test_bound_is_monotone_and_dense_is_perfect():
    env = AnompiConfig.for_profile("small").env
    T = env.n_frames
    accs = [passive_bound(T, uniform_frames(T, k), env.actor_len, env.event_len,
                          env.distractor_rate)["accuracy"] for k in (4, 8, 16, 32)]
    assert all(a <= b + 1e-12 for a, b in zip(accs, accs[1:]))
    assert passive_bound(T, np.arange(T), env.actor_len, env.event_len,
                         env.distractor_rate)["accuracy"] == pytest.approx(1.0)


def test_bound_is_the_same_float_for_any_blas_thread_count():
    """Bug fix: the bound summed probabilities with a BLAS dot product, whose rounding depends
    on the BLAS thread count and build (the committed bounds moved in their last digits when the
    venv was rebuilt). Summed exactly now, so two thread counts give the same float."""
    import os
    import subprocess
    import sys

    code = ("from components.anompi.bound import passive_bound; from components.anompi.env import uniform_frames; "
            "print(repr(passive_bound(128, uniform_frames(128, 16), (24, 32), (6, 10), 0.5)['accuracy']))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n}).stdout
            for n in ("1", "2")}
    assert len(outs) == 1
