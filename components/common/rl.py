"""Policy-gradient pieces shared by RL methods: advantages and the PPO clipped objective."""
from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
        gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a (time, env) rollout.
    ``dones[t]`` is 1 when the episode ended at step t (no bootstrap through it)."""
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_value)
    for t in reversed(range(steps)):
        next_value = last_value if t == steps - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        running = delta + gamma * lam * not_done * running
        advantages[t] = running
    return advantages, advantages + values


def ppo_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
             values: torch.Tensor, returns: torch.Tensor, entropy: torch.Tensor,
             clip: float = 0.2, value_coef: float = 0.5, entropy_coef: float = 0.01,
             old_values: torch.Tensor | None = None) -> torch.Tensor:
    """Clipped surrogate + value regression - entropy bonus (Schulman et al. 2017).
    With ``old_values`` (the values predicted when the rollout was collected) the value error is
    clipped as in PureJaxRL/popjaxrl and the baselines: the larger of the squared errors of the
    new value and of the new value moved at most ``clip`` away from the old one."""
    adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    ratio = torch.exp(new_logp - old_logp)
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    value = value_error(values, returns, old_values, clip)
    return -surrogate.mean() + value_coef * value - entropy_coef * entropy.mean()


def value_error(values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor | None = None,
                clip: float = 0.2) -> torch.Tensor:
    """Mean squared value error; clipped around ``old_values`` when they are given."""
    squared = (returns - values).pow(2)
    if old_values is None:
        return squared.mean()
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return torch.max(squared, (returns - clipped).pow(2)).mean()


def group_advantages(rewards: torch.Tensor, kind: str = "grpo", eps: float = 1e-6) -> torch.Tensor:
    """Per-group advantages for rewards of shape (groups, members).
    grpo: (r - mean) / (std + eps), std unbiased as torch.std (and verl) compute it;
    rloo: r - mean of the other members of its group."""
    if kind == "grpo":
        return (rewards - rewards.mean(dim=1, keepdim=True)) / (rewards.std(dim=1, keepdim=True) + eps)
    if kind == "rloo":
        k = rewards.shape[1]
        others = (rewards.sum(dim=1, keepdim=True) - rewards) / (k - 1)
        return rewards - others
    raise ValueError(f"unknown advantage {kind!r} (grpo, rloo)")


def informative_groups(rewards: torch.Tensor, tol: float = 1e-12) -> torch.Tensor:
    """(groups,) bool: the groups whose members' rewards differ (the others carry no gradient)."""
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) > tol
