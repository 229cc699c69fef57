"""linrnn's paper profile: every memory of the paper's RL study (S5 h = 12 and 256, Deep ALF,
LOF/ALF direct and softmax, plus memoryless) through the runtime with steps shrunk by --set,
and its preflight (fast). No data or checkpoints: every model of this paper is generated."""
import math

import pytest

from components.linrnn.config import PAPER_VARIANTS, LinrnnConfig
from flows.runtime.registry import get as load_method
from flows.runtime.runner import validate_config
from tests.paper.harness import run_paper_shape

SHRINK = [
    "seeds=[0,1]",
    "two_state.n_eps=2", "two_state.n_paths=2000",
    "action_sweep.inv_eps=[30.0,250.0]", "action_sweep.n_paths=200", "action_sweep.n_steps=100",
    "ringworld.total_steps=1024", "ringworld.n_envs=8", "ringworld.rollout_len=64",
    "ringworld.ppo_epochs=1", "ringworld.minibatches=2", "ringworld.s5_width=16",
    "ringworld.s5_layers=2", "ringworld.hidden=16", "ringworld.auc_bins=2",
]


@pytest.mark.paper_shape
@pytest.mark.slow
def test_linrnn_paper_profile_runs_every_memory_end_to_end(tmp_path):
    result = run_paper_shape("linrnn", tmp_path / "project", SHRINK)
    trained = [n for n in result.executed if n.startswith("train_ringworld")]
    assert len(trained) == len(PAPER_VARIANTS) * 2
    for variant in PAPER_VARIANTS:
        run = result.metrics("linrnn", "train_ringworld", f"{variant}-1")
        assert run["env_steps"] == 1024 and run["episodes"] > 0
    metrics = result.metrics("linrnn", "evaluate")
    for variant in PAPER_VARIANTS:
        for quantity in ("auc", "final_return"):
            assert -1.1 <= metrics[f"ringworld_{variant}_{quantity}"] <= 1.0
    for pair in ("deep_alf_h12_minus_s5_h12", "deep_alf_h12_minus_s5_h256", "alf_minus_lof_direct"):
        value = metrics[f"ringworld_{pair}_auc"]
        assert math.isfinite(value) and metrics[f"ringworld_{pair}_auc_ci_low"] <= value
    assert metrics["xi"] == pytest.approx(0.7206014, abs=1e-6)
    params = (result.project.root / "data" / "linrnn" / "params.yaml").read_text()
    assert "profile: paper" in params and "lr: 5.0e-05" in params and "device: auto" in params


def test_paper_profile_is_the_papers_rl_study():
    p = LinrnnConfig.for_profile("paper").ringworld
    assert LinrnnConfig.for_profile("paper").seeds == list(range(8))
    assert set(PAPER_VARIANTS) >= {"s5_h12", "s5_h256", "deep_alf_h12", "lof_direct", "lof_softmax",
                                   "alf_direct", "alf_softmax"} and p.variants == PAPER_VARIANTS
    assert (p.total_steps, p.n_envs, p.rollout_len, p.ppo_epochs, p.minibatches) == (30_000_000, 64, 1024, 30, 8)
    assert (p.lr, p.gamma, p.gae_lambda, p.entropy_coef, p.adam_eps, p.device) == (5e-5, 0.99, 1.0, 0.0, 1e-5, "auto")
    assert (p.clip_value_loss, p.network, p.value_coef) == (True, "popjaxrl", 0.5)
    stage = load_method("linrnn").stage("train_ringworld")
    assert stage.resources.gpus("paper") > 0 and stage.resources.gpus("small") == 0


def test_paper_profile_plays_the_papers_ringworld():
    """12 positions, goals 2 and 3, traps 6, 11 and 12 (the paper's 1-based numbering); the
    premise values are exact (no sampling)."""
    from components.linrnn.ringworld import RingSpec, premise_values

    spec = RingSpec(LinrnnConfig.for_profile("paper").ringworld)
    assert spec.n_pos == 12 and sorted(spec.goals + 1) == [2, 3] and sorted(spec.traps + 1) == [6, 11, 12]
    assert spec.n_obs == 4 and spec.eps == 0.05 and list(spec.starts) == [0, 3, 4, 6, 7, 8, 9]
    values = premise_values(spec)
    assert values["memory_gap"] == pytest.approx(0.6548, abs=1e-4)      # P1 holds on the paper's game
    assert values["min_start_moves"] == 1                               # P2 cannot: no start is 3 moves away


@pytest.mark.parametrize("override, key", [
    ("ringworld.variants=[alf_direct,gru]", "ringworld.variants: unknown variant 'gru'"),
    ("ringworld.variants=[s5_h7]", "ringworld.variants: 's5_h7' needs an even state size"),
    ("ringworld.device=cuda:0", "ringworld.device: 'cuda:0' requested but no CUDA device"),
    ("ringworld.network=gru", "ringworld.network: unknown network 'gru'"),
])
def test_paper_preflight_fails_in_one_line_naming_the_key(override, key, monkeypatch):
    import torch

    from flows.cli import parse_overrides

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as err:
        validate_config(load_method("linrnn"), "paper", parse_overrides([override], None))
    message = str(err.value)
    assert message.startswith(f"[repro] linrnn: {key}") and "\n" not in message


def test_paper_preflight_passes_for_the_paper_and_small_settings():
    validate_config(load_method("linrnn"), "paper", {})
    validate_config(load_method("linrnn"), "small", {})
