"""HealthBench-format grading: the per-item grader interface, the exact score, judges, kappa.

Scoring follows openai/simple-evals ``healthbench_eval.py`` (re-implemented, not copied):
- per example: sum of the points of met items / sum of the positive points (not clipped; it can
  be negative; ``None`` when the rubric has no positive item);
- per tag (axis, cluster): the same formula over the items carrying that tag, skipped when
  those items have no positive point; example-level tags (themes) receive the example score;
- aggregate: the mean over examples clipped to [0, 1]; its std is the std of the clipped mean
  over bootstrap resamples of the examples.

A grader sees one rubric item at a time, rendered as ``[points] criterion``, and the whole
conversation ending with the assistant's completion; it answers
``{"explanation": str, "criteria_met": bool}``. For a negative item ``criteria_met = True``
means the bad behaviour is present (the points are subtracted).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from components.orbit.ontology import parse_response

# Our own wording of the grader instructions (same fields and semantics as simple-evals'; the
# paper profile can load the official template from a file, see ``load_template``).
GRADER_TEMPLATE = """Look at the conversation below and at one rubric item, and decide whether the \
last assistant turn (the completion) satisfies that item.

# Conversation
<<conversation>>

# Rubric item
<<rubric_item>>

# Instructions
Reply with a JSON object with two fields, "explanation" (why the completion does or does not \
meet the item) and "criteria_met" (a boolean). An item with several requirements is met only \
when all of them are met, except that examples introduced by "such as" or "for example" need \
not all appear. Items with negative points describe undesirable behaviour: answer true when \
that behaviour is present. Return only the JSON object."""


def render_item(item: dict) -> str:
    return f"[{int(item['points'])}] {item['criterion']}"


def render_conversation(prompt: list[dict], completion: str) -> str:
    turns = list(prompt) + [{"role": "assistant", "content": completion}]
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in turns)


def grader_prompt(prompt: list[dict], completion: str, item: dict, template: str = GRADER_TEMPLATE) -> str:
    return (template.replace("<<conversation>>", render_conversation(prompt, completion))
            .replace("<<rubric_item>>", render_item(item)))


def load_template(path: str) -> str:
    with open(path) as f:
        return f.read()


class Grader(Protocol):
    name: str

    def grade(self, prompt: list[dict], completion: str, item: dict) -> dict:
        """One rubric item -> {"explanation": str, "criteria_met": bool}."""


# ---------------------------------------------------------------- the exact score
def example_score(points: Sequence[float], met: Sequence[bool]) -> float | None:
    """Sum of met points / sum of positive points (unclipped); None without positive items."""
    total = sum(p for p in points if p > 0)
    if total <= 0:
        return None
    return float(sum(p for p, m in zip(points, met) if m) / total)


def reward_score(points: Sequence[float], met: Sequence[bool], policy: str = "positive") -> float:
    """Training reward (the repo's ``normalize_score``): the example score; with no positive
    item, ``signed_fallback`` divides by the negative mass (so the reward is in [-1, 0])."""
    s = example_score(points, met)
    if s is not None:
        return s
    if policy == "signed_fallback":
        neg = sum(-p for p in points if p < 0)
        return float(sum(p for p, m in zip(points, met) if m) / neg) if neg > 0 else 0.0
    return 0.0


def clipped_mean(values: Sequence[float]) -> float:
    return float(np.clip(np.mean(values), 0.0, 1.0))


def clipped_stats(values: Sequence[float], n_bootstrap: int = 1000, seed: int = 0) -> dict[str, float]:
    """The aggregate as simple-evals computes it: clipped mean and bootstrap std of it."""
    values = np.asarray([v for v in values if v is not None], dtype=float)
    rng = np.random.default_rng(seed)
    boots = [clipped_mean(rng.choice(values, len(values), replace=True)) for _ in range(n_bootstrap)]
    return {"score": clipped_mean(values), "bootstrap_std": float(np.std(boots)), "n": int(len(values))}


def tag_scores(items: list[dict], met: Sequence[bool]) -> dict[str, float]:
    """Per rubric-tag score of one example (axis:*, cluster:*); level:* tags are not scored."""
    out = {}
    tags = sorted({t for it in items for t in it["tags"] if not t.startswith("level:")})
    for tag in tags:
        idx = [i for i, it in enumerate(items) if tag in it["tags"]]
        s = example_score([items[i]["points"] for i in idx], [met[i] for i in idx])
        if s is not None:
            out[tag] = s
    return out


def aggregate(examples: list[dict], n_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``examples``: [{"score", "example_tags", "tag_scores", "points", "met"}] -> overall,
    per-tag (clipped mean each), positive-item hit rate and negative-item rate."""
    scored = [e for e in examples if e["score"] is not None]
    out = {"overall": clipped_stats([e["score"] for e in scored], n_bootstrap, seed)}
    by_tag: dict[str, list[float]] = {}
    for e in scored:
        for t in e["example_tags"]:
            by_tag.setdefault(t, []).append(e["score"])
        for t, s in e["tag_scores"].items():
            by_tag.setdefault(t, []).append(s)
    out["tags"] = {t: clipped_mean(v) for t, v in sorted(by_tag.items())}
    pos = [m for e in examples for p, m in zip(e["points"], e["met"]) if p > 0]
    neg = [m for e in examples for p, m in zip(e["points"], e["met"]) if p < 0]
    out["positive_hit_rate"] = float(np.mean(pos)) if pos else float("nan")
    out["negative_rate"] = float(np.mean(neg)) if neg else float("nan")
    return out


# ---------------------------------------------------------------- judges
def eval_predicate(pred: dict, statements: list[str]) -> bool:
    """A synthetic item's hidden, checkable predicate over the statement ids of a response."""
    present = set(statements)
    ok = True
    if "any" in pred:
        ok &= bool(present & set(pred["any"]))
    if "all" in pred:
        ok &= set(pred["all"]) <= present
    if "none" in pred:
        ok &= not (present & set(pred["none"]))
    if "pairs" in pred:
        ok &= any(a in present and b in present for a, b in pred["pairs"])
    if "count" in pred:
        ok &= sum(s in set(pred["count"]["ids"]) for s in statements) >= pred["count"]["min"]
    if "min_n" in pred:
        ok &= len(statements) >= pred["min_n"]
    if "max_n" in pred:
        ok &= len(statements) <= pred["max_n"]
    return bool(ok)


class RuleJudge:
    """Deterministic judge: checks the item's hidden predicate on the parsed completion."""

    name = "rule"

    def grade(self, prompt: list[dict], completion: str, item: dict) -> dict:
        if not item.get("predicate"):
            raise ValueError(f"rule judge: item {render_item(item)!r} has no predicate; use the "
                             "minilm or openai judge for free-text rubrics")
        pred = json.loads(item["predicate"]) if isinstance(item["predicate"], str) else item["predicate"]
        statements = parse_response(completion)
        met = eval_predicate(pred, statements)
        return {"explanation": f"statements {statements} {'satisfy' if met else 'do not satisfy'} "
                               f"{pred}", "criteria_met": met}

    def grade_statements(self, statements: list[str], items: list[dict]) -> list[bool]:
        """Fast path for training: the same decision from already-parsed statements."""
        return [eval_predicate(json.loads(it["predicate"]), statements) for it in items]


class MiniLMJudge:
    """An independent semantic judge: the item is met when some statement of the completion is
    close (cosine >= threshold) to the criterion in MiniLM space. It does not see predicates,
    so it is a fair second opinion for the agreement figure."""

    name = "minilm"

    def __init__(self, encode: Callable[[list[str]], np.ndarray], threshold: float):
        self.encode, self.threshold = encode, threshold

    def similarity(self, completion: str, item: dict) -> float:
        from components.orbit.ontology import split_statements

        sents = split_statements(completion)
        if not sents:
            return 0.0
        e = self.encode([item["criterion"]] + sents)
        return float((e[1:] @ e[0]).max())

    def grade(self, prompt: list[dict], completion: str, item: dict) -> dict:
        sim = self.similarity(completion, item)
        return {"explanation": f"max cosine {sim:.3f} vs threshold {self.threshold}",
                "criteria_met": bool(sim >= self.threshold)}


class OpenAIJudge:
    """Any OpenAI-compatible chat endpoint (the paper profile), one call per item, invalid JSON
    retried as simple-evals does."""

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                 template: str = GRADER_TEMPLATE, max_retries: int = 5):
        self.base_url, self.model, self.api_key_env = base_url.rstrip("/"), model, api_key_env
        self.template, self.max_retries = template, max_retries

    def grade(self, prompt: list[dict], completion: str, item: dict) -> dict:
        from components.orbit.endpoint import chat

        text = grader_prompt(prompt, completion, item, self.template)
        for _ in range(self.max_retries):
            reply = chat(self.base_url, self.model, [{"role": "user", "content": text}], self.api_key_env)
            parsed = parse_json_reply(reply)
            if isinstance(parsed, dict) and isinstance(parsed.get("criteria_met"), bool):
                return {"explanation": str(parsed.get("explanation", "")),
                        "criteria_met": parsed["criteria_met"]}
        raise RuntimeError(f"judge {self.model}: no valid JSON after {self.max_retries} tries")


def parse_json_reply(text: str) -> Any:
    """JSON from a model reply, tolerating ```json fences; None when there is none."""
    from components.common.openai_client import parse_json_reply as parse

    try:
        return parse(text)
    except ValueError:
        return None


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    po = float(np.mean(a == b))
    pa, pb = a.mean(), b.mean()
    pe = float(pa * pb + (1 - pa) * (1 - pb))
    return 1.0 if pe == 1.0 else (po - pe) / (1 - pe)


def grade_example(grader: Grader, prompt: list[dict], completion: str, items: list[dict],
                  example_tags: list[str]) -> dict:
    met = [bool(grader.grade(prompt, completion, it)["criteria_met"]) for it in items]
    points = [int(it["points"]) for it in items]
    return {"score": example_score(points, met), "met": met, "points": points,
            "tag_scores": tag_scores(items, met), "example_tags": list(example_tags)}
