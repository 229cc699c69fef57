"""QA exact match and token F1 of generated answers (paper profile: the generator reads the
top-10 retrieved components), SQuAD-style: answers are lower-cased, punctuation and the
articles a / an / the removed, whitespace collapsed; a prediction scores the best match over a
query's gold answers. (LILaC's MultimodalQA script scores list answers DROP-style by aligning
answer bags; this is the plain SQuAD form, one string per gold answer.)"""
from __future__ import annotations

import re
import string
from collections import Counter

ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in str(text).lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: list[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:   # SQuAD v2: an empty answer matches only an empty answer
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, golds: list[str]) -> float:
    return max((token_f1(prediction, g) for g in golds), default=0.0)


def answers_by_query(table: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for q, a in zip(table["qid"], table["answer"]):
        out.setdefault(q, []).append(a)
    return out


def qa_scores(runs: dict, answers: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """Per method with generated answers: mean EM and F1 (percent) over the queries that have
    gold answers, and the generator's calls / tokens per query."""
    acc: dict[str, dict[str, list[float]]] = {}
    preds = runs.get("prediction")
    if preds is None:
        return {}
    for i, (m, qid, pred) in enumerate(zip(runs["method"], runs["qid"], preds)):
        if not runs["qa_calls"][i] or qid not in answers:
            continue
        d = acc.setdefault(m, {"EM": [], "F1": [], "qa_calls": [], "qa_tokens": []})
        d["EM"].append(100 * exact_match(pred, answers[qid]))
        d["F1"].append(100 * f1(pred, answers[qid]))
        d["qa_calls"].append(runs["qa_calls"][i]), d["qa_tokens"].append(runs["qa_tokens"][i])
    return {m: {k: sum(v) / len(v) for k, v in d.items()} for m, d in acc.items()}
