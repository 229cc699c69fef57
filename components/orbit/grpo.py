"""GRPO with DAPO's choices, the rubric reward, and the incremental rubric curriculum.

- Advantage: rewards normalised within each group of ``n`` rollouts of one prompt,
  (r - mean) / (std + eps) with the unbiased std (as verl's GRPO); groups whose rewards are all
  equal carry no signal and are dropped (DAPO dynamic sampling, which then draws more prompts,
  up to ``max_gen_batches`` generation rounds per step).
- Loss: clipped ratio with clip-higher (1 - 0.2, 1 + 0.28), token-mean over all response
  tokens of the batch, no KL term (DAPO).
- Reward: the HealthBench per-example formula over the rubric items in use (all of them, or the
  curriculum's active window), plus DAPO's overlong penalty.
- Curriculum (``CurriculumState``, the official repo's curriculum_admission variant): per query,
  items in difficulty order; states candidate -> active -> mastered; per-item EMA of success
  (met for p > 0, not met for p < 0); mastered when EMA > threshold (strict), leaving the reward;
  cold start admits a full window; afterwards at most one admission per update and only when
  the mean active EMA exceeds the gate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from components.common import rl
from components.orbit.healthbench import eval_predicate, reward_score


# ---------------------------------------------------------------- advantages and loss
def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """rewards (G, n) -> (advantages (G, n), keep (G,) bool: groups whose rewards differ)."""
    return rl.group_advantages(rewards, "grpo", eps), rl.informative_groups(rewards)


def clipped_token_mean_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                            mask: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.28
                            ) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric clipping; ``advantages`` (B,) per sequence,
    log-probs and mask (B, T); mean over all unmasked tokens of the batch (token-mean)."""
    adv = advantages[:, None].expand_as(new_logp)
    ratio = torch.exp(new_logp - old_logp)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    n = mask.sum().clamp_min(1.0)
    loss = (per_token * mask).sum() / n
    with torch.no_grad():
        frac = ((clipped > unclipped).float() * mask).sum() / n
    return loss, {"clip_frac": float(frac)}


def overlong_penalty(length: int, max_len: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment: 0 up to max_len - buffer, then linear down to -factor."""
    if buffer <= 0:
        return 0.0
    return min(-(length - (max_len - buffer)) / buffer * factor, 0.0)


# ---------------------------------------------------------------- curriculum
@dataclass
class CurriculumState:
    """Rubric curriculum of one query (indices refer to the query's rubric items)."""

    order: list[int]
    window: int = 6
    alpha: float = 0.1
    mastery: float = 0.9
    gate: float = 0.75
    max_admit: int = 1
    state: dict[int, str] = field(default_factory=dict)
    ema: dict[int, float] = field(default_factory=dict)
    started: bool = False

    def __post_init__(self) -> None:
        for i in self.order:
            self.state.setdefault(i, "candidate")
            self.ema.setdefault(i, 0.0)

    def _in(self, s: str) -> list[int]:
        return [i for i in self.order if self.state[i] == s]

    @property
    def active(self) -> list[int]:
        if not self.started:               # cold start: a full window
            for i in self._in("candidate")[: self.window]:
                self.state[i] = "active"
            self.started = True
        return self._in("active")

    @property
    def mastered(self) -> list[int]:
        return self._in("mastered")

    def reward_items(self) -> list[int]:
        """Items in the reward: the active window; once every item is mastered, all items
        (so a fully mastered query still guards against regressions)."""
        act = self.active
        return act if act else list(self.order)

    def update(self, successes: np.ndarray, items: list[int]) -> None:
        """``successes`` (n_rollouts, len(items)) in {0, 1}; one EMA step per rollout."""
        for row in np.asarray(successes, float):
            for j, i in enumerate(items):
                if self.state[i] == "active":
                    self.ema[i] = (1 - self.alpha) * self.ema[i] + self.alpha * row[j]
        for i in self.active:
            if self.ema[i] > self.mastery:
                self.state[i] = "mastered"
        admitted = 0
        while admitted < self.max_admit and self._in("candidate") and len(self.active) < self.window:
            act = self.active
            if act and float(np.mean([self.ema[i] for i in act])) <= self.gate:
                break
            self.state[self._in("candidate")[0]] = "active"
            admitted += 1


def success_matrix(met: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Curriculum success: met for positive items, NOT met for negative ones."""
    return np.where(points[None, :] > 0, met, ~met).astype(float)


# ---------------------------------------------------------------- the training loop
@dataclass
class Case:
    prompt: list[dict]
    items: list[dict]
    order: list[int]
    preds: list[dict] = field(default_factory=list)
    points: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        import json

        self.preds = [json.loads(it["predicate"]) for it in self.items]
        self.points = np.asarray([it["points"] for it in self.items], float)

    def judge(self, statements: list[str]) -> np.ndarray:
        return np.asarray([eval_predicate(p, statements) for p in self.preds], bool)


@dataclass
class GRPOSettings:
    steps: int
    prompts_per_step: int
    group_size: int
    lr: float
    clip_low: float = 0.2
    clip_high: float = 0.28
    minibatches: int = 2
    temperature: float = 1.0
    max_gen_batches: int = 3
    overlong_buffer: int = 3
    overlong_factor: float = 1.0
    grad_clip: float = 1.0
    reward_policy: str = "positive"
    curriculum: bool = False
    window: int = 6
    alpha: float = 0.1
    mastery: float = 0.9
    gate: float = 0.75


def train_grpo(policy, cases: list[Case], s: GRPOSettings, seed: int, log=None, progress=None) -> dict:
    """Run GRPO on ``policy`` (components.orbit.policy.Policy) in place; returns a summary."""
    from components.orbit.policy import response_mask

    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=s.lr, weight_decay=0.0)
    curricula = [CurriculumState(list(c.order), s.window, s.alpha, s.mastery, s.gate) for c in cases]
    prompt_ids_all = policy.encode([c.prompt for c in cases])
    queue: list[int] = []
    history = []

    def next_prompts(k: int) -> list[int]:
        nonlocal queue
        out = []
        while len(out) < k:
            if not queue:
                queue = list(rng.permutation(len(cases)))
            out.append(int(queue.pop()))
        return out

    for step in range(1, s.steps + 1):
        kept_groups: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        rewards_seen, full_scores, n_groups, n_gen = [], [], 0, 0
        policy.eval()
        while len(kept_groups) < s.prompts_per_step and n_gen < s.max_gen_batches:
            n_gen += 1
            idx = next_prompts(s.prompts_per_step)
            resp = policy.sample(prompt_ids_all[idx], s.temperature, gen, n=s.group_size)
            statements = [policy.vocab.decode_response(r) for r in resp.tolist()]
            for g, ci in enumerate(idx):
                case, cur = cases[ci], curricula[ci]
                rows = statements[g * s.group_size:(g + 1) * s.group_size]
                met = np.stack([case.judge(st) for st in rows])
                use = cur.reward_items() if s.curriculum else list(range(len(case.items)))
                r = np.asarray([reward_score(case.points[use], m[use], s.reward_policy) for m in met])
                r = r + np.asarray([overlong_penalty(len(st), policy.max_response, s.overlong_buffer,
                                                     s.overlong_factor) for st in rows])
                full_scores += [reward_score(case.points, m, s.reward_policy) for m in met]
                if s.curriculum:
                    cur.update(success_matrix(met[:, use], case.points[use]), use)
                rewards_seen += r.tolist()
                n_groups += 1
                if r.max() - r.min() > 1e-12 and len(kept_groups) < s.prompts_per_step:
                    sl = slice(g * s.group_size, (g + 1) * s.group_size)
                    kept_groups.append((ci, resp[sl], torch.tensor(r, dtype=torch.float32)))
        record = {"reward": float(np.mean(rewards_seen)), "full_rubric_score": float(np.mean(full_scores)),
                  "kept_groups": len(kept_groups), "kept_frac": len(kept_groups) / max(n_groups, 1),
                  "gen_batches": n_gen}
        if kept_groups:
            n = s.group_size
            prompts = prompt_ids_all[[ci for ci, _, _ in kept_groups]]
            resp = torch.cat([r for _, r, _ in kept_groups])
            adv, _ = group_advantages(torch.stack([rw for _, _, rw in kept_groups]))
            adv = adv.reshape(-1)
            mask = response_mask(resp)
            with torch.no_grad():
                old = policy.group_logprobs(prompts, resp, n)
            policy.train()
            losses, clip = [], []
            for groups in torch.from_numpy(rng.permutation(len(kept_groups))).chunk(s.minibatches):
                rows = (groups[:, None] * n + torch.arange(n)[None, :]).reshape(-1)
                new = policy.group_logprobs(prompts[groups], resp[rows], n)
                loss, info = clipped_token_mean_loss(new, old[rows], adv[rows], mask[rows], s.clip_low,
                                                     s.clip_high)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), s.grad_clip)
                opt.step()
                losses.append(float(loss.detach()))
                clip.append(info["clip_frac"])
            record.update(loss=float(np.mean(losses)), clip_frac=float(np.mean(clip)),
                          response_len=float(mask.sum(1).mean()))
        if s.curriculum:
            seen = [c for c in curricula if c.started]
            record.update(
                avg_ema=float(np.mean([np.mean([c.ema[i] for i in c.order]) for c in seen])) if seen else 0.0,
                active_items=float(np.mean([len(c._in("active")) for c in seen])) if seen else 0.0,
                mastered_items=float(np.mean([len(c.mastered) for c in seen])) if seen else 0.0)
        history.append({"step": step, **record})
        if log is not None:
            log(record, step)
        if progress is not None and (step % 10 == 0 or step == s.steps):
            progress(step, s.steps, f"reward {record['reward']:.3f}")
    policy.eval()
    last = history[-max(1, len(history) // 10):]
    return {"final_reward": float(np.mean([h["reward"] for h in last])),
            "final_full_rubric_score": float(np.mean([h["full_rubric_score"] for h in last])),
            "first_full_rubric_score": float(np.mean([h["full_rubric_score"]
                                                      for h in history[:max(1, len(history) // 10)]])),
            "mean_kept_frac": float(np.mean([h["kept_frac"] for h in history])),
            "mastered_share": float(np.mean([len(c.mastered) / max(1, len(c.order))
                                             for c in curricula if c.started])) if s.curriculum else math.nan,
            "history": history}
