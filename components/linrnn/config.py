"""Params of the linrnn reproduction. Defaults are the ``small`` profile."""
from __future__ import annotations

from typing import ClassVar

from components.common.config import MethodConfig, Section


class ExactCheck(Section):
    n_states: int = 8            # random permutation HMM, as in the audit's check
    n_obs: int = 12
    n_steps: int = 40
    n_actions: int = 4           # action-controlled version: 8 states x 4 permutation actions
    action_inits: int = 64
    action_steps: int = 127


class TwoState(Section):
    """Eq. 66: swap chain that stays with prob. eps, emissions 0.9/0.1, error at step k."""
    inv_eps_min: float = 30.0
    inv_eps_max: float = 250.0
    n_eps: int = 23              # 23 values of 1/eps uniform on [30, 250]
    n_paths: int = 20_000
    n_steps: int = 1000          # p_1000 is the proxy for limsup_k
    checkpoints: list[int] = [900, 950, 1000]
    schedules: list[str] = ["alf_0.7_log", "alf_sqrt", "eps_sq", "zero", "one", "bayes"]


class ActionSweep(Section):
    n_states: int = 8
    n_actions: int = 4
    n_obs: int = 6
    inv_eps: list[float] = [30.0, 100.0, 250.0]
    n_paths: int = 4000
    n_steps: int = 400


class RingWorld(Section):
    """RingWorld-lite (our documented re-design of the paper's game; see CLAIMS.md)."""
    variants: list[str] = ["memoryless", "alf_direct", "lof_softmax"]
    eps: float = 0.05
    alf_delta: float = 0.1
    episode_len: int = 50
    n_envs: int = 64
    total_steps: int = 60_000
    rollout_len: int = 32
    hidden: int = 64
    lr: float = 3e-3
    gamma: float = 0.97
    gae_lambda: float = 0.95
    clip: float = 0.2
    ppo_epochs: int = 4
    minibatches: int = 4
    entropy_coef: float = 0.01
    eval_episodes: int = 2000


class LinrnnConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    exact: ExactCheck = ExactCheck()
    two_state: TwoState = TwoState()
    action_sweep: ActionSweep = ActionSweep()
    ringworld: RingWorld = RingWorld()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "two_state": {"n_eps": 2, "n_paths": 20_000},
        "action_sweep": {"inv_eps": [30.0, 250.0], "n_paths": 500, "n_steps": 200},
        "ringworld": {"variants": ["memoryless", "alf_direct"], "total_steps": 4096,
                      "n_envs": 32, "eval_episodes": 200},
    }
    PAPER: ClassVar[dict] = {
        "seeds": [0, 1, 2, 3, 4, 5, 6, 7],
        "ringworld": {"total_steps": 2_000_000, "n_envs": 256, "eval_episodes": 10_000},
    }
