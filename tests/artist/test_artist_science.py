"""Unit tests of the ARTIST components: view builder, generator, rewards, advantages, loop."""
import numpy as np
import pytest
import torch

from components.artist import rewards as R
from components.artist import tasks as T
from components.common.rl import group_advantages
from components.artist.views import (action_windows, area_resample, build_all_views, build_views,
                                     evidence_actions, fraction_read)

torch.set_num_threads(1)
N, B, NF, NQ = 512, 64, 16, 4


class _Views:   # the Views section, without pydantic
    budget, n_fine, n_quarters, max_zooms = B, NF, NQ, 4


def _taskset(series, families=("localize",)):
    from components.artist.policy import TaskSet
    from components.artist.views import window_geometry

    series = np.asarray(series, dtype=np.float32)
    k = len(series)
    lengths = np.full(k, series.shape[1])
    return TaskSet(family=list(families) * k, family_id=torch.zeros(k, dtype=torch.long),
                   args=torch.zeros(k, 2, dtype=torch.long), n_options=torch.full((k,), 4),
                   answer=torch.zeros(k, dtype=torch.long), length=lengths, series=series,
                   evidence=[[]] * k, decoys=[[]] * k,
                   views=torch.from_numpy(build_all_views(series, lengths, B, NF, NQ)),
                   geometry=torch.from_numpy(window_geometry(NF, NQ)))


# ------------------------------------------------------------------ views
def test_area_resample_is_block_mean_and_preserves_mean():
    x = np.random.default_rng(0).normal(size=N)
    np.testing.assert_allclose(area_resample(x, B), x.reshape(B, -1).mean(1), atol=1e-5)
    np.testing.assert_allclose(area_resample(x[:37], 128).mean(), x[:37].mean(), atol=1e-5)
    np.testing.assert_allclose(area_resample(np.full(10, 3.0), 128), 3.0, atol=1e-6)


def test_vectorised_views_match_row_by_row():
    rng = np.random.default_rng(1)
    s = rng.normal(size=(4, N)).astype(np.float32)
    lengths = np.array([N, 32, N, 100])
    ref = np.stack([build_views(x, n, B, NF, NQ) for x, n in zip(s, lengths)])
    np.testing.assert_allclose(build_all_views(s, lengths, B, NF, NQ), ref, atol=1e-5)


def test_reasoner_never_sees_unselected_data():
    """Change every sample outside the chosen windows, keeping each coarse bin's mean (so the
    coarse overview is unchanged): every model input and both heads' outputs stay the same."""
    from components.artist.model import ArtistPolicy
    from components.artist.policy import forward_state, gather_inputs

    rng = np.random.default_rng(2)
    x = rng.normal(size=N)
    chosen = torch.tensor([[3, 17, -1, -1]])           # fine window 3 and quarter 1
    wins = action_windows(N, NF, NQ)
    inside = np.zeros(N, bool)
    for a in (3, 17):
        inside[wins[a][0]:wins[a][1]] = True
    bin_len = N // B
    pert = rng.normal(size=(B, bin_len))
    pert -= pert.mean(1, keepdims=True)                # zero mean per coarse bin
    y = x + 5 * pert.ravel() * (~inside)
    assert np.abs(y - x)[~inside].max() > 1.0
    tx, ty = _taskset([x]), _taskset([y])
    idx = torch.tensor([0])
    for a, b in zip(gather_inputs(tx, idx, chosen), gather_inputs(ty, idx, chosen)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    model = ArtistPolicy(n_actions=NF + NQ, budget=B, max_views=5, patch=16).eval()
    with torch.no_grad():
        for a, b in zip(forward_state(model, tx, idx, chosen), forward_state(model, ty, idx, chosen)):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    # ... while a change inside a chosen window does reach the model
    z = x.copy()
    z[wins[3][0]:wins[3][0] + 8] += pert[0, :8] * 5 if bin_len >= 8 else 5
    tz = _taskset([z])
    assert not torch.allclose(gather_inputs(tx, idx, chosen)[2], gather_inputs(tz, idx, chosen)[2])


def test_fraction_read_counts_the_union_of_windows():
    acts = np.array([[0, 1, -1, -1], [16, 0, -1, -1], [-1, -1, -1, -1]])
    np.testing.assert_allclose(fraction_read(acts, np.full(3, N), NF, NQ), [2 / 16, 4 / 16, 0.0])


def test_fourier_geometry_makes_a_windows_quarter_a_linear_read_out():
    """The localize answer is the quarter of the view holding the burst. From (start, end, width)
    alone no least-squares linear read-out gets the quarter of the 16 fine windows right (it is a
    staircase in start); with the sin/cos features it does, for every window."""
    from components.artist.model import ArtistPolicy, geometry_features
    from components.artist.views import window_geometry

    g = torch.from_numpy(window_geometry(NF, NQ))[1:1 + NF].double()
    quarter = torch.arange(NF) // (NF // NQ)
    target = torch.nn.functional.one_hot(quarter, NQ).double()

    def read_out_accuracy(kind):
        x = torch.cat([geometry_features(g, kind), torch.ones(NF, 1, dtype=g.dtype)], dim=1)
        w = torch.linalg.pinv(x, rtol=1e-8) @ target   # least squares; the features are rank-deficient
        return float(((x @ w).argmax(1) == quarter).double().mean())

    assert read_out_accuracy("linear") <= 0.75
    assert read_out_accuracy("fourier") == 1.0
    model = ArtistPolicy(n_actions=NF + NQ, budget=B, max_views=5, patch=16, geometry="fourier").eval()
    ctrl, ans = model(torch.zeros(2, dtype=torch.long), torch.zeros(2, 2, 3), torch.randn(2, 3, B),
                      torch.from_numpy(window_geometry(NF, NQ))[[0, 1, 18]][None].expand(2, -1, -1),
                      torch.ones(2, 3, dtype=torch.bool))
    assert ctrl.shape == (2, NF + NQ + 1) and ans.shape == (2, 5) and torch.isfinite(ans).all()
    with pytest.raises(ValueError, match="unknown geometry"):
        ArtistPolicy(n_actions=NF + NQ, budget=B, max_views=5, patch=16, geometry="polar")


# ------------------------------------------------------------------ generator
def _hf(x):
    """Amplitude of the period-4 oscillation in a segment (quadrature demodulation)."""
    x = np.asarray(x, dtype=float)
    t = np.arange(len(x))
    return 2 * abs(np.sum((x - x.mean()) * np.exp(-2j * np.pi * t / T.BURST_PERIOD))) / np.sum(np.hanning(len(x)))


def _gen(family, k=30, seed=0, n=N):
    rng = np.random.default_rng(seed)
    return [T.make_example(family, rng, n, 32, 0.5, 0.3) for _ in range(k)]


def test_localize_evidence_is_in_the_answer_quarter_and_carries_the_burst():
    for ex in _gen("localize"):
        (s, e), = ex["evidence"]
        assert s // (N // 4) == ex["answer"] and (e - 1) // (N // 4) == ex["answer"]
        x = ex["series"]
        assert 1 <= len(ex["decoys"]) <= 3          # always a look-alike to tell apart
        for d0, d1 in ex["decoys"]:
            assert _hf(x[s:e]) > _hf(x[d0:d1])
            assert d0 // (N // 4) != ex["answer"]    # decoys sit in other quarters


def test_compare_answer_matches_burst_strength():
    for ex in _gen("compare"):
        (s0, e0), (s1, e1) = ex["evidence"]
        w = N // 16
        assert [s0 // w, s1 // w] == ex["args"] and ex["args"][0] < ex["args"][1]   # named in time order
        stronger_first = _hf(ex["series"][s0:e0]) > _hf(ex["series"][s1:e1])
        assert stronger_first == (ex["answer"] == 0)


def test_count_answer_is_the_number_of_bursts():
    # sensor noise makes a demodulated amplitude of ~0.2 +- 0.1 on a 32-sample window: the
    # count read off the data matches the answer almost always, not always (irreducible noise)
    exs = _gen("count", k=100)
    assert all(len(ex["evidence"]) == 4 for ex in exs)
    hits = [sum(_hf(ex["series"][s:e]) > 0.55 for s, e in ex["evidence"]) == ex["answer"] for ex in exs]
    assert np.mean(hits) >= 0.95


def test_rhythm_answer_is_the_dominant_period():
    for ex in _gen("rhythm"):
        x = ex["series"] - ex["series"].mean()
        spec = np.abs(np.fft.rfft(x)) ** 2
        freqs = np.fft.rfftfreq(len(x))
        band = [np.sum(spec[(freqs > 0.85 / p) & (freqs < 1.15 / p)]) for p in T.RHYTHM_PERIODS]
        assert int(np.argmax(band)) == ex["answer"]


def test_etiology_and_short_evidence():
    for ex in _gen("etiology"):
        (s, e), = ex["evidence"]
        assert 0 <= s < e <= N
    for ex in _gen("short"):
        assert ex["length"] == 32 and ex["evidence"] == [[0, 32]]
        x = ex["series"]
        slope = np.polyfit(np.arange(32), x, 1)[0]
        if T.SHORT_CLASSES[ex["answer"]] == "up_trend":
            assert slope > 0
        if T.SHORT_CLASSES[ex["answer"]] == "down_trend":
            assert slope < 0


def test_answers_are_balanced_and_backgrounds_include_real_series():
    exs = _gen("localize", k=400, seed=3)
    counts = np.bincount([e["answer"] for e in exs], minlength=4)
    assert counts.min() > 60
    assert len(T.real_series()) == 4 and min(len(s) for s in T.real_series()) >= 60


def test_evidence_actions_and_traces():
    from components.artist.train import synthesise_trace

    assert evidence_actions([[40, 72]], N, NF) == [1]
    assert evidence_actions([[0, N]], N, NF) == []
    rng = np.random.default_rng(0)
    for ex in _gen("count", k=10):
        tr = synthesise_trace(ex["evidence"], ex["decoys"], N, NF, 4, 0.3, rng)
        assert len(tr) <= 4 and len(set(tr)) == len(tr)
        assert set(evidence_actions(ex["evidence"], N, NF)) <= set(tr) or len(tr) == 4
    short = _gen("short", k=5)
    assert all(synthesise_trace(e["evidence"], [], 32, NF, 4, 1.0, rng) == [] for e in short)


def test_sft_traces_visit_every_candidate_so_geometry_gives_nothing_away():
    """Bug fix (issue 45): traces held only the evidence window, so the windows visited gave the
    localisation answer away. Now they visit the real event and every decoy, in random order."""
    from components.artist.train import geometry_determined_share, synthesise_trace
    from components.artist.views import candidate_actions

    rng = np.random.default_rng(0)
    exs = _gen("localize", k=40)
    orders = set()
    for ex in exs:
        tr = synthesise_trace(ex["evidence"], ex["decoys"], N, NF, 4, 0.0, rng)
        cands = candidate_actions(ex["evidence"], ex["decoys"], N, NF)
        assert sorted(tr) == cands and len(cands) >= 2
        orders.add(tr.index(evidence_actions(ex["evidence"], N, NF)[0]))
    assert len(orders) >= 2                      # the real event is not always first
    assert geometry_determined_share(["localize"] * len(exs), [e["evidence"] for e in exs],
                                     [e["decoys"] for e in exs], [N] * len(exs), NF, NQ) == 0.0


def test_oracle_windows_include_the_decoys():
    from components.artist.policy import oracle_actions

    exs = _gen("localize", k=8)
    ts = _taskset([e["series"] for e in exs])
    ts.evidence, ts.decoys = [e["evidence"] for e in exs], [e["decoys"] for e in exs]
    acts = oracle_actions(ts, NF, 4)
    for row, ex in zip(acts.tolist(), exs):
        assert [a for a in row if a >= 0] == sorted(evidence_actions(ex["evidence"] + ex["decoys"], N, NF))


def test_coarse_view_points_at_the_candidate_bumps():
    """Premise P2's measurement: at ~2 sigma the matched filter on the coarse view finds the
    candidate windows far above chance; at the old 0.8 sigma much less so."""
    from components.artist.views import candidate_actions, coarse_candidate_precision, coarse_view

    def precision(amp):
        rng = np.random.default_rng(5)
        out = []
        for _ in range(60):
            ex = T.make_example("count", rng, 1024, 32, 0.5, 0.3, amp)
            cands = candidate_actions(ex["evidence"], ex["decoys"], 1024, NF)
            out.append(coarse_candidate_precision(coarse_view(ex["series"], 128), cands, NF, 32 / 8))
        return np.mean(out)

    strong, weak = precision(2.0), precision(0.8)
    assert strong >= 0.65 and strong > weak + 0.1      # chance is 4 / 16 = 0.25


def test_premises_take_the_worst_zoom_family_and_average_seeds():
    from components.artist.report import premises

    sft = [{"val_oracle_acc_localize": 0.95, "val_oracle_acc_compare": 0.85, "val_oracle_acc_count": 0.9,
            "val_oracle_acc_rhythm": 0.2},
           {"val_oracle_acc_localize": 0.93, "val_oracle_acc_compare": 0.97, "val_oracle_acc_count": 0.91,
            "val_oracle_acc_rhythm": 0.2}]
    out = premises(sft, {"val_coarse_candidate_precision": 0.7, "val_coarse_chance": 0.2,
                         "geometry_determined_share": 0.0}, ["localize", "compare", "count", "rhythm"])
    assert out["P1_per_seed"] == [0.85, 0.91]              # rhythm is not a zoom family
    assert out["P1_val_oracle_acc_worst"] == pytest.approx(0.88)
    assert out["P2_val_coarse_candidate_precision"] == 0.7


# ------------------------------------------------------------------ rewards
CALL = '<think>t</think><tool_call>{"name": "timeseries_zoom_in_tool", "arguments": {"ts_seg": [%d, %d]}}</tool_call>'


def test_format_score_follows_the_official_rules():
    assert R.format_score(CALL % (0, 64), 512, final_round=False) == 1.0
    assert R.format_score("<think>t</think><answer>ACCEPT</answer>", 512, final_round=True) == 1.0
    assert R.format_score(CALL % (0, 64) + "<answer>A</answer>", 512, False) == -0.5   # both
    assert R.format_score("<think>t</think> nothing", 512, False) == -1.0              # neither
    assert R.format_score(CALL % (64, 64), 512, False) == -1.0                         # start >= end
    assert R.format_score(CALL % (100, 600), 512, False) == -0.5                       # end > L
    assert R.format_score(CALL % (0, 64), 512, final_round=True) == -1.0               # no ACCEPT
    assert R.format_score('<tool_call>{"name": "timeseries_zoom_in_tool", "arguments": {"ts_seg": [0, 8]}}'
                          '</tool_call>', 512, False) == 0.5                           # no think block
    fmt, err = R.trajectory_format([(0, 64), (128, 256)], 512)
    assert fmt == 1.0 and not err


def test_rewards_stay_in_range_on_fixed_cases():
    kw = dict(w_consistency=3.0, round_penalty=0.1, w_format=1.0, w_explore=1.0, anneal=300, lo=2, hi=4)
    assert R.controller_reward(1.0, 2, 1.0, False, 2, step=0, **kw) == pytest.approx(3 - 0.2 + 1 + 1)
    assert R.controller_reward(1.0, 2, 1.0, False, 2, step=300, **kw) == pytest.approx(3 - 0.2 + 1)
    assert R.controller_reward(0.5, 1, 1.0, False, 1, step=0, **kw) == pytest.approx(1.5 - 0.1 + 1)
    assert R.controller_reward(1.0, 1, 1.0, True, 1, step=0, **kw) == -2.0
    assert R.controller_reward(0.0, 5, 1.0, False, 5, step=0, **kw) == pytest.approx(0.5)  # 5 > hi
    lo_hi = [R.controller_reward(c, r, 1.0, False, r, s, **kw)
             for c in (0, 1 / 6, 1) for r in range(5) for s in (0, 150, 400)]
    assert min(lo_hi) >= -0.4 + 1 - 1e-9 and max(lo_hi) <= 3 + 1 + 1
    np.testing.assert_allclose(R.reasoner_reward(np.array([0, 1])), [1.0, 4.0])


def test_exploration_bonus_anneals_within_the_run():
    """Bug fix (issue 45): the bonus annealed over 300 steps in a 200-iteration run, so it was
    still paid at the end. It now reaches 0 inside every profile's run."""
    from components.artist.config import ArtistConfig
    from components.artist.train import explore_anneal_steps

    for profile in ({}, ArtistConfig.SMOKE):
        d = ArtistConfig().model_dump()
        for k, v in profile.items():
            d[k] = {**d[k], **v} if isinstance(v, dict) else v
        rl = ArtistConfig.model_validate(d).rl
        anneal = explore_anneal_steps(rl)
        assert anneal < rl.iterations
        assert R.exploration_bonus(3, rl.iterations - 1, rl.w_explore, anneal, 2, 4) == 0.0
        assert R.exploration_bonus(3, 0, rl.w_explore, anneal, 2, 4) == rl.w_explore


def test_global_normalise_centres_group_advantages():
    r = torch.tensor([[1.0, 2.0, 4.0, 7.0], [0.0, 0.0, 0.0, 0.0]])
    g = R.global_normalise(group_advantages(r, "grpo"))
    assert abs(float(g.mean())) < 1e-6


def test_consistency_over_six_samples_is_unbiased():
    """Consistency (share of 6 sampled answers that are right) is a binomial/6 estimate of the
    reasoner's accuracy given the segments: its mean matches p, its variance p(1-p)/6."""
    from components.artist.policy import sample_answers

    p_true = torch.tensor([0.1, 0.5, 0.8])
    logits = torch.log(torch.stack([p_true, 1 - p_true], 1)).repeat(4000, 1)
    gen = torch.Generator().manual_seed(0)
    ans = sample_answers(logits, 1.0, 6, gen)
    cons = (ans == 0).float().mean(1).view(4000, 3)
    np.testing.assert_allclose(cons.mean(0).numpy(), p_true.numpy(), atol=0.01)
    np.testing.assert_allclose(cons.var(0).numpy(), (p_true * (1 - p_true) / 6).numpy(), rtol=0.1)


def test_variance_guided_choice_prefers_informative_groups():
    rng = np.random.default_rng(0)
    groups = np.array([[4, 4, 4, 4, 4, 4], [1, 4, 1, 4, 4, 1], [1, 1, 1, 1, 1, 1]], dtype=float)
    picks = np.bincount([R.variance_guided_choice(groups, 1.0, 1e-3, rng) for _ in range(2000)], minlength=3)
    assert picks[1] > 1980


# ------------------------------------------------------------------ policy loop
def test_rollout_respects_budget_and_never_repeats_a_window():
    from components.artist.model import ArtistPolicy
    from components.artist.policy import rollout

    tasks = _taskset(np.random.default_rng(0).normal(size=(16, N)))
    model = ArtistPolicy(n_actions=NF + NQ, budget=B, max_views=5, patch=16).eval()
    with torch.no_grad():
        model.controller_head.bias[NF + NQ] = -20.0     # never STOP: use every round
    chosen, final = rollout(model, tasks, torch.arange(16), 4, 1.0, torch.Generator().manual_seed(0))
    assert chosen.shape == (16, 4) and bool((chosen >= 0).all())
    assert all(len(set(row.tolist())) == 4 for row in chosen)
    assert torch.isinf(final[:, 4]).all() and torch.isfinite(final[:, :4]).all()   # 4 options


def test_masked_kl_is_zero_for_equal_policies_and_has_finite_gradients():
    from components.artist.train import masked_kl

    logits = torch.tensor([[0.3, -1.0, 2.0, float("-inf"), float("-inf")]], requires_grad=True)
    ref = logits.detach().clone()
    kl = masked_kl(logits, ref)
    assert float(kl) == pytest.approx(0.0, abs=1e-6)
    (masked_kl(logits, ref + torch.tensor([[1.0, 0, 0, 0, 0]]))).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_pointer_head_maps_each_coarse_token_to_the_windows_it_covers():
    """Coarse token q (of 4) scores fine windows 4q..4q+3 and quarter q; STOP gets nothing."""
    from components.artist.model import ArtistPolicy
    from components.artist.policy import forward_state

    model = ArtistPolicy(n_actions=NF + NQ, budget=B, max_views=5, patch=B // 4, n_fine=NF, n_quarters=NQ).eval()
    with torch.no_grad():
        model.controller_head.weight.zero_()
        model.controller_head.bias.zero_()
    q = torch.arange(4.0)[:, None]
    marks = torch.cat([10 * q + torch.arange(4.0)[None], 10 * q + 4], dim=1)        # (4 tokens, 5)
    model.pointer.register_forward_hook(lambda m, i, o: marks.expand_as(o))
    tasks = _taskset(np.random.default_rng(0).normal(size=(2, 1024)))
    ctrl, _ = forward_state(model, tasks, torch.arange(2), torch.full((2, 4), -1, dtype=torch.long))
    expect = [10 * (w // 4) + w % 4 for w in range(NF)] + [10 * k + 4 for k in range(NQ)] + [0]
    torch.testing.assert_close(ctrl, torch.tensor([expect] * 2, dtype=torch.float32))
