"""The rubric reward and the incremental rubric curricula, as a reward function for TRL's
``GRPOTrainer`` (``components.common.lm_rl.grpo_train``: group-normalised advantages, the
clip-higher objective 0.2 / 0.28, DAPO's token-mean loss, no KL).

- Reward: the HealthBench per-example formula over the rubric items in use (all of them, or a
  curriculum's window), plus DAPO's overlong penalty on the completion's token count.
- ``CurriculumState`` (the official repo's curriculum_admission variant): per query,
  items in difficulty order; states candidate -> active -> mastered; per-item EMA of success
  (met for p > 0, not met for p < 0); mastered when EMA > threshold (strict), leaving the reward;
  cold start admits a full window; afterwards at most one admission per update and only when
  the mean active EMA exceeds the gate.
- ``StochasticReviewState`` (the repo's stochastic_review variant): the window holds the
  unmastered active items, then a random sample of mastered items (at most ``review_ratio`` of
  the window), then new candidates in order, with no gate. Each rollout's reward is the mean
  success over the window weighted by ``min_w + (1 - min_w) (1 - ema)^power`` with the EMA
  updated first, so mastered items stay in the reward with a small weight. Our choice (as the
  issue asks): every item's EMA starts at its base success rate from the difficulty filter.
- Items are graded by ``ItemJudge``: a JSON predicate over statement ids (the small profile's
  generated items) by rule, a free-text criterion (HealthBench, an LLM-written rubric) by the
  OpenAI-compatible rubric judge, one call per item and reply, several in flight.
- The reward function keeps the per-query state across steps, which is how TRL expresses the
  curriculum: the trainer calls it once per generation batch with whole groups.
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


def overlong_penalty(length: int, max_len: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment: 0 up to max_len - buffer, then linear down to -factor."""
    if buffer <= 0:
        return 0.0
    return min(-(length - (max_len - buffer)) / buffer * factor, 0.0)


# ---------------------------------------------------------------- curriculum
class _ItemStates:
    """Per-item status (candidate / active / mastered) and EMA, in the query's difficulty order."""

    order: list[int]
    state: dict[int, str]
    ema: dict[int, float]

    def _init_items(self, init_ema: dict[int, float]) -> None:
        for i in self.order:
            self.state.setdefault(i, "candidate")
            self.ema.setdefault(i, float(init_ema.get(i, 0.0)))

    def _in(self, s: str) -> list[int]:
        return [i for i in self.order if self.state[i] == s]

    @property
    def mastered(self) -> list[int]:
        return self._in("mastered")


@dataclass
class CurriculumState(_ItemStates):
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
        self._init_items({})

    def score_group(self, met: np.ndarray, points: np.ndarray, reward_policy: str) -> np.ndarray:
        """Rewards of one group (met (n, items)) on the active window, then one EMA update."""
        use = self.reward_items()
        r = np.asarray([reward_score(points[use], m[use], reward_policy) for m in met])
        self.update(success_matrix(met[:, use], points[use]), use)
        return r

    @property
    def active(self) -> list[int]:
        if not self.started:               # cold start: a full window
            for i in self._in("candidate")[: self.window]:
                self.state[i] = "active"
            self.started = True
        return self._in("active")

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




@dataclass
class StochasticReviewState(_ItemStates):
    """The stochastic_review curriculum of one query (see the module docstring)."""

    order: list[int]
    init_ema: dict[int, float]
    window: int = 5
    alpha: float = 0.1
    mastery: float = 0.9
    review_ratio: float = 0.5
    min_weight: float = 0.2
    power: float = 1.0
    state: dict[int, str] = field(default_factory=dict)
    ema: dict[int, float] = field(default_factory=dict)
    started: bool = True

    def __post_init__(self) -> None:
        self._init_items(self.init_ema)

    def window_items(self, rng) -> list[int]:
        """Graduate active items over the mastery threshold, then assemble the window."""
        for i in self._in("active"):
            if self.ema[i] > self.mastery:
                self.state[i] = "mastered"
        items = self._in("active")
        slots = self.window - len(items)
        mastered = self.mastered
        n_review = min(max(slots, 0), int(self.window * self.review_ratio), len(mastered))
        if n_review:
            items += rng.sample(mastered, n_review)
            slots -= n_review
        for i in self._in("candidate")[:max(slots, 0)]:
            self.state[i] = "active"
            items.append(i)
        return items

    def weight(self, i: int) -> float:
        return self.min_weight + (1 - self.min_weight) * (1 - self.ema[i]) ** self.power

    def score_rollout(self, success: np.ndarray, items: list[int]) -> float:
        """EMA step for every window item, then the EMA-weighted mean success."""
        total = weights = 0.0
        for s, i in zip(np.asarray(success, float), items):
            self.ema[i] = (1 - self.alpha) * self.ema[i] + self.alpha * s
            w = self.weight(i)
            total, weights = total + w * s, weights + w
        return total / weights if weights > 0 else 0.0

    def score_group(self, met: np.ndarray, points: np.ndarray, rng) -> np.ndarray:
        """Rewards of one group: one window for the group, rollouts scored in order."""
        use = self.window_items(rng)
        if not use:
            return np.asarray([reward_score(points, m) for m in met])
        succ = success_matrix(met[:, use], points[use])
        return np.asarray([self.score_rollout(row, use) for row in succ])


# ---------------------------------------------------------------- the reward function
@dataclass
class Case:
    """One training query: its prompt, rubric items, difficulty order and base success rates.
    An item's ``predicate`` is a JSON check over statement ids (the small profile's generated
    items) or empty (free text: HealthBench-style criteria that only a judge can grade)."""

    prompt: list[dict]
    items: list[dict]
    order: list[int]
    item_success: list[float] = field(default_factory=list)
    preds: list[dict | None] = field(default_factory=list)
    points: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        import json

        self.preds = [json.loads(p) if isinstance(p := it.get("predicate"), str) and p else (p or None)
                      for it in self.items]
        self.points = np.asarray([it["points"] for it in self.items], float)

    @property
    def free_text(self) -> list[int]:
        """Indices of the items without a predicate (graded by the judge)."""
        return [j for j, p in enumerate(self.preds) if p is None]

    def judge(self, statements: list[str]) -> np.ndarray:
        """The rule verdicts (every item must carry a predicate)."""
        if self.free_text:
            raise ValueError("free-text rubric items need a judge (ItemJudge with a grader)")
        return np.asarray([eval_predicate(p, statements) for p in self.preds], bool)


class ItemJudge:
    """criteria_met for every item of a case and reply: an item with a predicate is checked on
    the reply's statement ids; a free-text item goes to ``grader`` (the HealthBench grader
    interface, e.g. ``healthbench.OpenAIJudge``), ``workers`` calls in flight at once."""

    def __init__(self, grader=None, workers: int = 8):
        self.grader, self.workers = grader, max(1, workers)
        self.calls = 0

    def met_many(self, batch: list[tuple[Case, list[tuple[list[str], str]]]]) -> list[np.ndarray]:
        """``batch``: (case, [(statement ids, reply text)]) -> per case a (replies, items) bool array."""
        out = [np.zeros((len(replies), len(case.items)), bool) for case, replies in batch]
        jobs = []
        for b, (case, replies) in enumerate(batch):
            for r, (statements, text) in enumerate(replies):
                for j, pred in enumerate(case.preds):
                    if pred is not None:
                        out[b][r, j] = eval_predicate(pred, statements)
                    else:
                        jobs.append((b, r, j, case.prompt, text, case.items[j]))
        if jobs:
            for (b, r, j, *_), met in zip(jobs, self._grade(jobs)):
                out[b][r, j] = met
        return out

    def met(self, case: Case, replies: list[tuple[list[str], str]]) -> np.ndarray:
        return self.met_many([(case, replies)])[0]

    def _grade(self, jobs: list[tuple]) -> list[bool]:
        if self.grader is None:
            raise ValueError("orbit: free-text rubric items need a judge; set judge.endpoint.base_url and "
                             "judge.endpoint.model (an OpenAI-compatible server)")
        from concurrent.futures import ThreadPoolExecutor

        def grade(job) -> bool:
            *_, prompt, text, it = job
            return bool(self.grader.grade(prompt, text, it)["criteria_met"])

        self.calls += len(jobs)
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(grade, jobs))


def item_judge(j) -> ItemJudge:
    """The training judge of config section ``judge``: its endpoint grades free-text items
    (none configured: only predicate items can be graded)."""
    from components.orbit.healthbench import OpenAIJudge

    ep = j.endpoint
    grader = OpenAIJudge(ep.base_url, ep.model, ep.api_key_env) if ep.base_url and ep.model else None
    return ItemJudge(grader, ep.concurrency)


CURRICULA = ("none", "curriculum_admission", "stochastic_review")


@dataclass
class RewardSettings:
    curriculum: str = "none"
    max_response: int = 10
    overlong_buffer: int = 3
    overlong_factor: float = 1.0
    reward_policy: str = "positive"
    window: int = 6
    alpha: float = 0.1
    mastery: float = 0.9
    gate: float = 0.75
    review_window: int = 5
    review_ratio: float = 0.5
    min_weight: float = 0.2
    weight_power: float = 1.0


def new_curriculum(case: Case, s: RewardSettings):
    if s.curriculum == "curriculum_admission":
        return CurriculumState(list(case.order), s.window, s.alpha, s.mastery, s.gate)
    if s.curriculum == "stochastic_review":
        return StochasticReviewState(list(case.order), dict(enumerate(case.item_success)), s.review_window,
                                     s.alpha, s.mastery, s.review_ratio, s.min_weight, s.weight_power)
    if s.curriculum != "none":
        raise ValueError(f"unknown curriculum {s.curriculum!r}; choose from {CURRICULA}")
    return None


def completion_text(completion) -> str:
    return completion if isinstance(completion, str) else completion[-1]["content"]


class RubricReward:
    """TRL reward function: ``case_index`` (a dataset column) names each completion's case; the
    completions of one case in a call form its GRPO group. Keeps one curriculum per case and a
    record per call (the training curve)."""

    __name__ = "rubric"

    def __init__(self, cases: list[Case], s: RewardSettings, seed: int, parse, judge: ItemJudge | None = None):
        import random

        self.cases, self.s, self.parse = cases, s, parse
        self.judge = judge or ItemJudge()
        self.rng = random.Random(seed)
        self.curricula = [new_curriculum(c, s) for c in cases]
        self.records: list[dict] = []

    def _group(self, ci: int, met: np.ndarray) -> np.ndarray:
        case, cur = self.cases[ci], self.curricula[ci]
        if cur is None:
            return np.asarray([reward_score(case.points, m, self.s.reward_policy) for m in met])
        if isinstance(cur, StochasticReviewState):
            return cur.score_group(met, case.points, self.rng)
        return cur.score_group(met, case.points, self.s.reward_policy)

    def __call__(self, prompts, completions, case_index, completion_ids=None, **_) -> list[float]:
        groups: dict[int, list[int]] = {}
        for j, ci in enumerate(case_index):
            groups.setdefault(int(ci), []).append(j)
        rewards = np.zeros(len(completions))
        full, kept = [], []
        texts = [completion_text(c) for c in completions]
        verdicts = self.judge.met_many([(self.cases[ci], [(self.parse(texts[j]), texts[j]) for j in rows])
                                        for ci, rows in groups.items()])
        for (ci, rows), met in zip(groups.items(), verdicts):
            case = self.cases[ci]
            r = self._group(ci, met)
            lengths = [len(completion_ids[j]) if completion_ids is not None else 0 for j in rows]
            r = r + np.asarray([overlong_penalty(n, self.s.max_response, self.s.overlong_buffer,
                                                 self.s.overlong_factor) for n in lengths])
            rewards[rows] = r
            full += [reward_score(case.points, m) for m in met]
            kept.append(bool(rl.informative_groups(torch.tensor(r)[None])[0]))
        self.records.append(self._record(rewards, full, kept))
        return rewards.tolist()

    def _record(self, rewards, full, kept) -> dict:
        rec = {"reward": float(np.mean(rewards)), "full_rubric_score": float(np.mean(full)),
               "kept_frac": float(np.mean(kept))}
        seen = [c for c in self.curricula if c is not None and c.started]
        if seen:
            rec.update(avg_ema=float(np.mean([np.mean([c.ema[i] for i in c.order]) for c in seen])),
                       active_items=float(np.mean([len(c._in("active")) for c in seen])),
                       mastered_items=float(np.mean([len(c.mastered) for c in seen])))
        return rec

    def summary(self) -> dict:
        h = self.records
        k = max(1, len(h) // 10)
        out = {"final_reward": float(np.mean([r["reward"] for r in h[-k:]])),
               "final_full_rubric_score": float(np.mean([r["full_rubric_score"] for r in h[-k:]])),
               "first_full_rubric_score": float(np.mean([r["full_rubric_score"] for r in h[:k]])),
               "mean_kept_frac": float(np.mean([r["kept_frac"] for r in h]))}
        cur = [c for c in self.curricula if c is not None]
        out["mastered_share"] = (float(np.mean([len(c.mastered) / max(1, len(c.order)) for c in cur]))
                                 if cur else math.nan)
        return out
