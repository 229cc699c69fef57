"""The paper profile's recurrent memories: the log-depth scan against the plain recurrence,
S5's HiPPO initialisation, and Deep ALF reducing to the fixed ALF feature."""
import numpy as np
import pytest
import torch

from components.linrnn.config import LinrnnConfig
from components.linrnn.ppo import MLPHead, N_ACTIONS, InputFeatures, build, train_ppo
from components.linrnn.config import parse_recurrent
from components.common.linear_recurrence import affine_scan, hippo_diagonal
from components.linrnn.recurrent import DeepALFPolicy, S5Policy
from components.linrnn.ringworld import MOVES, FilterFeatures, RingSpec


def loop(a, b, h0, diagonal):
    h, out = h0, []
    for t in range(a.shape[0]):
        h = a[t] * h + b[t] if diagonal else (a[t] @ h.unsqueeze(-1)).squeeze(-1) + b[t]
        out.append(h)
    return torch.stack(out)


@pytest.mark.parametrize("steps", [1, 5, 16, 37])
def test_affine_scan_equals_the_recurrence_diagonal_complex_and_matrix(steps):
    g = torch.Generator().manual_seed(steps)
    a = torch.complex(torch.rand(steps, 3, 4, generator=g), torch.rand(steps, 3, 4, generator=g)) * 0.7
    a[steps // 2] = 0                      # a reset in the middle
    b = torch.complex(torch.randn(steps, 3, 4, generator=g), torch.randn(steps, 3, 4, generator=g))
    h0 = torch.complex(torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g))
    assert torch.allclose(affine_scan(a, b, h0), loop(a, b, h0, True), atol=1e-5)
    m = torch.randn(steps, 3, 4, 4, generator=g) * 0.4
    x, x0 = torch.randn(steps, 3, 4, generator=g), torch.randn(3, 4, generator=g)
    assert torch.allclose(affine_scan(m, x, x0, diagonal=False), loop(m, x, x0, False), atol=1e-5)


def test_hippo_diagonal_rebuilds_the_normal_hippo_matrix():
    n = 8
    eigs, V = hippo_diagonal(n)
    q = np.sqrt(np.arange(n) + 0.5)
    normal = -0.5 * np.eye(n) + np.sign(np.subtract.outer(np.arange(n), np.arange(n))).T * np.outer(q, q)
    assert np.allclose(eigs.real, -0.5)
    assert np.allclose(V.conj().T @ V, np.eye(n), atol=1e-10)
    assert np.allclose(V @ np.diag(eigs) @ V.conj().T, normal, atol=1e-10)
    assert np.allclose(np.sort(eigs.imag), np.sort(-eigs.imag))     # conjugate pairs


def test_parse_recurrent_names():
    assert parse_recurrent("s5_h256") == ("s5", 256)
    assert parse_recurrent("deep_alf_h12") == ("deep_alf", 12)
    assert parse_recurrent("lru") is None and parse_recurrent("s5_256") is None


def rollout_inputs(steps=23, envs=5, n_obs=4, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, n_obs, (steps, envs))
    prev = rng.integers(0, N_ACTIONS, (steps, envs))
    starts = (rng.random((steps, envs)) < 0.15).astype(np.float32)
    x = np.zeros((steps, envs, n_obs + N_ACTIONS), dtype=np.float32)
    np.put_along_axis(x[..., :n_obs], obs[..., None], 1.0, axis=-1)
    np.put_along_axis(x[..., n_obs:], prev[..., None], 1.0, axis=-1)
    x[..., n_obs:] *= (1 - starts)[..., None]          # no previous action at an episode start
    return torch.tensor(x), torch.tensor(starts)


@pytest.mark.parametrize("kind", ["s5", "deep_alf"])
def test_sequence_matches_stepping_and_gradients_reach_the_recurrence(kind):
    rng = np.random.default_rng(1)
    xs, starts = rollout_inputs()
    if kind == "s5":
        model = S5Policy(xs.shape[-1], 6, 8, 2, MLPHead(8, 16), rng)
    else:
        model = DeepALFPolicy(4, N_ACTIONS, 6, 0.1, MLPHead(6, 16), rng)
    h = h0 = model.initial_state(xs.shape[1]) + 0.1    # a carried-over state, reset where starts = 1
    stepped = []
    for t in range(xs.shape[0]):
        logits, value, h = model.step(xs[t], h, starts[t])
        stepped.append(logits)
    logits, values = model.sequence(xs, h0, starts)
    assert torch.allclose(logits, torch.stack(stepped), atol=1e-5)
    logits.sum().backward()
    recurrence = model.blocks[0].ssm.log_step if kind == "s5" else model.delta_logit
    assert recurrence.grad is not None and torch.isfinite(recurrence.grad).all() and recurrence.grad.abs().sum() > 0


def test_deep_alf_with_the_true_permutations_and_log_emissions_is_the_fixed_alf():
    p = LinrnnConfig().ringworld
    spec, envs, rng = RingSpec(p), 6, np.random.default_rng(2)
    n = spec.n_pos
    model = DeepALFPolicy(spec.n_obs, N_ACTIONS, n, p.alf_delta, MLPHead(n, 8), rng)
    with torch.no_grad():
        for a, move in enumerate(MOVES):        # (P(a) w)_i = w_{i - m_a}
            model.A[a] = torch.tensor(np.eye(n)[(np.arange(n) - move) % n], dtype=torch.float32)
        model.B.copy_(torch.tensor(np.log(spec.E), dtype=torch.float32))
    fixed, inputs = FilterFeatures("alf_direct", spec, envs, p.alf_delta), InputFeatures(spec, envs)
    y = rng.integers(0, spec.n_obs, envs)
    all_on = np.ones(envs, dtype=bool)
    fixed.reset(all_on, y), inputs.reset(all_on, y)
    h, start = model.initial_state(envs), torch.ones(envs)
    for _ in range(30):
        with torch.no_grad():
            _, _, h = model.step(torch.tensor(inputs.state, dtype=torch.float32), h, start)
        assert np.allclose(h.numpy(), fixed.state, atol=1e-5)
        actions, y = rng.integers(0, N_ACTIONS, envs), rng.integers(0, spec.n_obs, envs)
        fixed.update(actions, y), inputs.update(actions, y)
        start = torch.zeros(envs)


def test_cost_scales_one_measured_update_to_a_run():
    from components.linrnn.cost import update_seconds

    sets = {"ringworld": {"total_steps": 4096, "n_envs": 8, "rollout_len": 16, "ppo_epochs": 3,
                          "minibatches": 2, "s5_width": 8, "s5_layers": 1}}
    c = update_seconds("s5_h4", LinrnnConfig.for_profile("paper", sets).ringworld)
    assert c["collect_s"] > 0 and c["minibatch_s"] > 0
    assert c["update_s"] == pytest.approx(c["collect_s"] + 6 * c["minibatch_s"])
    assert c["run_hours"] == pytest.approx(32 * c["update_s"] / 3600)


def test_the_paper_variants_train_a_few_updates_on_cpu():
    sets = {"ringworld": {"total_steps": 256, "n_envs": 8, "rollout_len": 16, "ppo_epochs": 1,
                          "minibatches": 2, "s5_width": 8, "s5_layers": 2, "device": "auto"}}
    p = LinrnnConfig.for_profile("paper", sets).ringworld
    for variant in ("deep_alf_h12", "s5_h12"):
        result = train_ppo(variant, 0, p)
        assert result["env_steps"] == 256 and result["curve"]
        memory, model = build(variant, RingSpec(p), p, np.random.default_rng(0))
        assert sum(v.numel() for v in model.state_dict().values()) == \
            sum(v.numel() for v in result["model"].values())


def test_truncated_normal_stays_within_two_deviations_and_keeps_the_scale():
    from components.common.linear_recurrence import TRUNCATED_STD, truncated_normal

    z = truncated_normal(np.random.default_rng(3), (200, 100), 0.5)
    assert np.abs(z).max() <= 2 * 0.5 / TRUNCATED_STD
    assert z.std() == pytest.approx(0.5, rel=0.02) and abs(z.mean()) < 0.01


@pytest.mark.parametrize("shape", [(5, 5), (7, 3), (3, 7)])
def test_random_orthogonal_has_orthonormal_rows_or_columns(shape):
    from components.linrnn.recurrent import random_orthogonal

    q = random_orthogonal(shape[0], np.random.default_rng(4), shape[1])
    small = min(shape)
    assert q.shape == shape
    gram = q.T @ q if shape[0] >= shape[1] else q @ q.T
    assert np.allclose(gram, np.eye(small), atol=1e-12)


def test_popjaxrl_network_has_separate_bodies_with_lu_et_al_initialisation():
    sets = {"ringworld": {"s5_width": 16, "s5_layers": 1}}
    p = LinrnnConfig.for_profile("paper", sets).ringworld
    _, model = build("s5_h12", RingSpec(p), p, np.random.default_rng(0))
    head = model.head
    assert isinstance(head.actor[1], torch.nn.LeakyReLU) and head.actor[0] is not head.critic[0]
    for layer, gain in [(head.actor[0], 2.0), (head.critic[2], 2.0), (head.pi, 0.01), (head.v, 1.0),
                        (model.encoder[0], np.sqrt(2))]:
        w = layer.weight.detach().double().numpy()
        gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
        assert np.allclose(gram, gain**2 * np.eye(min(w.shape)), atol=1e-5)
        assert not layer.bias.detach().any()
    glu = model.blocks[0].out.weight.detach().numpy()          # no gain named: lecun-normal
    assert glu.std() == pytest.approx(1 / np.sqrt(16), rel=0.15) and not model.blocks[0].out.bias.detach().any()
    small = LinrnnConfig().ringworld
    _, feature_model = build("alf_direct", RingSpec(small), small, np.random.default_rng(0))
    assert isinstance(feature_model.head, MLPHead)            # the small profile keeps its shared trunk


@pytest.mark.parametrize("clip", [False, True])
def test_clip_value_loss_passes_the_rollout_values_to_the_loss(clip, monkeypatch):
    from components.linrnn import ppo

    seen, real_loss = [], ppo.ppo_loss
    monkeypatch.setattr(ppo, "ppo_loss", lambda *a, **k: seen.append(k["old_values"]) or real_loss(*a, **k))
    sets = {"ringworld": {"total_steps": 64, "n_envs": 4, "rollout_len": 16, "ppo_epochs": 1,
                          "minibatches": 2, "clip_value_loss": clip}}
    train_ppo("alf_direct", 0, LinrnnConfig.for_profile("small", sets).ringworld)
    assert len(seen) == 2 and all((v is not None) == clip for v in seen)
    if clip:
        assert seen[0].shape == (16 * 2,)
