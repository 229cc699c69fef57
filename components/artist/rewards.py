"""Rewards and advantages of hierarchical policy optimisation (the official scheme, §2 of the notes).

Controller: r = w_c * consistency - lambda * rounds + w_f * format + exploration bonus, where
consistency is the share of N reasoner samples (on the final round) that answer correctly, the
exploration bonus ``w_e * max(0, 1 - step / anneal)`` is paid when the trajectory used between
``lo`` and ``hi`` distinct segments, and any format error sets the whole reward to -2.
Reasoner: r = w_a * accuracy + w_f * format.

Our controller acts in a discrete window grid, so its actions are always well formed. We still
render each trajectory in the paper's text protocol and score that text with the official
rules, so the format term is the same function as the paper's (it is +1 for every trajectory
our policy can produce and therefore cancels in the group-normalised advantage).
"""
from __future__ import annotations

import json
import re

import numpy as np
import torch

_TOOL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S)


def format_score(text: str, length: int, final_round: bool) -> float:
    """Score one controller turn in [-1, 1].

    Non-final rounds need one valid zoom tool call ``{"name": "timeseries_zoom_in_tool",
    "arguments": {"ts_seg": [start, end]}}`` with 0 <= start < end <= length; the final round
    needs ``<answer>ACCEPT</answer>``. Both a tool call and an answer: -0.5; neither: -1;
    start >= end (or negative, or unparsable): -1; end > length: -0.5. Exactly one think block
    is expected; a missing or repeated one costs 0.5.
    """
    tools, answers = _TOOL.findall(text), _ANSWER.findall(text)
    if tools and answers:
        return -0.5
    if not tools and not answers:
        return -1.0
    score = 1.0
    if final_round:
        if tools or answers[0].strip() != "ACCEPT":
            return -1.0
    else:
        if answers or len(tools) != 1:
            return -1.0
        try:
            call = json.loads(tools[0])
            start, end = call["arguments"]["ts_seg"]
            if call.get("name") != "timeseries_zoom_in_tool":
                return -1.0
            start, end = int(start), int(end)
        except (ValueError, KeyError, TypeError):
            return -1.0
        if start < 0 or start >= end:
            return -1.0
        if end > length:
            return -0.5
    if len(_THINK.findall(text)) != 1:
        score -= 0.5
    return score


def render_turns(windows: list[tuple[int, int]]) -> list[str]:
    """The paper's text protocol for a trajectory: one zoom call per window, then ACCEPT."""
    turns = [f'<think>inspect segment {s}-{e}</think><tool_call>'
             f'{json.dumps({"name": "timeseries_zoom_in_tool", "arguments": {"ts_seg": [int(s), int(e)]}})}'
             f'</tool_call>' for s, e in windows]
    return turns + ["<think>enough evidence</think><answer>ACCEPT</answer>"]


def trajectory_format(windows: list[tuple[int, int]], length: int) -> tuple[float, bool]:
    """Mean format score over the turns of a trajectory, and whether any turn had an error."""
    turns = render_turns(windows)
    scores = [format_score(t, length, final_round=(i == len(turns) - 1)) for i, t in enumerate(turns)]
    return float(np.mean(scores)), bool(min(scores) < 1.0)


def exploration_bonus(n_unique: int, step: int, weight: float, anneal: int, lo: int, hi: int) -> float:
    if lo <= n_unique <= hi:
        return weight * max(0.0, 1.0 - step / anneal)
    return 0.0


def controller_reward(consistency: float, rounds: int, fmt: float, format_error: bool, n_unique: int,
                      step: int, *, w_consistency: float = 3.0, round_penalty: float = 0.1,
                      w_format: float = 1.0, error_reward: float = -2.0, w_explore: float = 1.0,
                      anneal: int = 300, lo: int = 2, hi: int = 4) -> float:
    if format_error:
        return error_reward
    return (w_consistency * consistency - round_penalty * rounds + w_format * fmt
            + exploration_bonus(n_unique, step, w_explore, anneal, lo, hi))


def reasoner_reward(correct: np.ndarray | float, fmt: float = 1.0, w_accuracy: float = 3.0,
                    w_format: float = 1.0) -> np.ndarray:
    return w_accuracy * np.asarray(correct, dtype=float) + w_format * fmt


def global_normalise(adv: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Batch-level normalisation after the per-question one (trajectory-level credit)."""
    flat = adv.flatten()
    if flat.numel() < 2 or float(flat.std()) < eps:
        return adv - flat.mean()
    return (adv - flat.mean()) / (flat.std() + eps)


def variance_guided_choice(group_rewards: np.ndarray, temperature: float, eps: float,
                           rng: np.random.Generator) -> int:
    """Pick which controller trajectory's reasoner group to train on: p ∝ (std + eps)^(1/T)."""
    std = np.asarray(group_rewards, dtype=float).std(axis=1)
    weights = (std + eps) ** (1.0 / temperature)
    return int(rng.choice(len(std), p=weights / weights.sum()))
