"""Stages evaluate and judge_agreement.

evaluate: every policy (the base, and each GRPO variant x seed) answers the held-out cases
(``repeats`` sampled replies each); a HealthBench-interface grader judges each reference rubric
item; the exact HealthBench score is aggregated per policy.
judge_agreement: an independent MiniLM judge re-grades the same items; Cohen's kappa against
the rule judge. Its similarity threshold is picked on training-split base rollouts only.
"""
from __future__ import annotations

import json

import numpy as np
import torch

from components.common.io import read_table, write_json_atomic, write_table
from components.orbit.healthbench import (OpenAIJudge, RuleJudge, aggregate, cohen_kappa, example_score,
                                          grade_example)
from components.orbit.ontology import PHRASES, split_statements
from components.orbit.lm_policy import load_lm_policy, rollouts


def make_judge(e):
    if e.judge == "rule":
        return RuleJudge()
    return OpenAIJudge(e.endpoint.base_url, e.endpoint.model, e.endpoint.api_key_env)


def policies(ctx) -> dict[str, object]:
    out = {"base": ctx.inputs["train_base"] / "policy"}
    for key, path in sorted(ctx.inputs["grpo_train"].items()):
        out[key] = path / "policy"
    return out


def variant_of(name: str) -> str:
    return name if name == "base" else name.rsplit("-", 1)[0]


def judge_map(fn, jobs: list, workers: int) -> list:
    """``fn`` over ``jobs`` in order; an endpoint judge runs ``workers`` examples at once."""
    if workers <= 1:
        return [fn(job) for job in jobs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, jobs))


def score_policies(pols: dict, cases: list[dict], e, judge, progress=None) -> tuple[list[dict], dict]:
    """Every policy answers every case ``e.repeats`` times; HealthBench aggregate per policy."""
    workers = e.endpoint.concurrency if judge.name == "openai" else 1
    prompts = [json.loads(c["prompt"]) for c in cases]
    rows, results = [], {}
    for n, (name, path) in enumerate(pols.items()):
        replies = rollouts(load_lm_policy(path), prompts, e.repeats, e.temperature, e.seed)
        jobs = [(case, prompt, rep, text) for case, prompt, reps in zip(cases, prompts, replies)
                for rep, (_, text) in enumerate(reps)]
        examples = judge_map(lambda job: grade_example(judge, job[1], job[3], json.loads(job[0]["rubrics"]),
                                                       json.loads(job[0]["example_tags"])), jobs, workers)
        for (case, _, rep, text), ex in zip(jobs, examples):
            rows.append({"policy": name, "variant": variant_of(name), "prompt_id": case["prompt_id"],
                         "repeat": rep, "response": text, "met": json.dumps(ex["met"]),
                         "score": ex["score"] if ex["score"] is not None else float("nan")})
        results[name] = aggregate(examples, e.n_bootstrap, e.seed)
        if progress is not None:
            progress(n + 1, len(pols), f"evaluated {name}")
    return rows, results


def evaluate_stage(cfg, ctx) -> None:
    """Held-out test scores, and validation scores (premise checks only: P1, P2)."""
    e = cfg.evaluate
    torch.set_num_threads(1)
    cases = read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()
    judge = make_judge(e)
    pols = policies(ctx)
    metrics = {}
    val = [c for c in cases if c["split"] == "val"]
    if val:
        _, val_results = score_policies(pols, val, e, judge)
        write_json_atomic(ctx.out_dir / "val_results.json", val_results)
        metrics.update({f"val_{k}": v for k, v in summary_metrics(val_results).items() if k.startswith("score_")})
    rows, results = score_policies(pols, [c for c in cases if c["split"] == "test"], e, judge, ctx.progress)
    write_table(ctx.out_dir / "responses.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    write_json_atomic(ctx.out_dir / "results.json", results)
    ctx.write_metrics({**summary_metrics(results), **metrics})


def summary_metrics(results: dict[str, dict]) -> dict[str, float]:
    """Flat metrics: per policy, and per variant the mean (and std) over seeds."""
    out: dict[str, float] = {}
    by_variant: dict[str, list[str]] = {}
    for name in results:
        by_variant.setdefault(variant_of(name), []).append(name)
    for variant, names in sorted(by_variant.items()):
        for key, get in (("score", lambda r: r["overall"]["score"]),
                         ("bootstrap_std", lambda r: r["overall"]["bootstrap_std"]),
                         ("positive_hit_rate", lambda r: r["positive_hit_rate"]),
                         ("negative_rate", lambda r: r["negative_rate"])):
            vals = [get(results[n]) for n in names]
            out[f"{key}_{variant}"] = float(np.mean(vals))
            if len(vals) > 1:
                out[f"{key}_{variant}_seed_std"] = float(np.std(vals, ddof=1))
        for n in names:
            if n != variant:
                out[f"score_{n}"] = results[n]["overall"]["score"]
        tags = sorted({t for n in names for t in results[n]["tags"] if t.startswith(("axis:", "theme:"))})
        for t in tags:
            vals = [results[n]["tags"][t] for n in names if t in results[n]["tags"]]
            out[f"{t.replace(':', '_')}_{variant}"] = float(np.mean(vals))
    return out


# ---------------------------------------------------------------- judge agreement
def judge_agreement_stage(cfg, ctx) -> None:
    from components.orbit.embed import Embedder

    a = cfg.agreement
    torch.set_num_threads(1)
    embed = Embedder()
    # The MiniLM judge (healthbench.MiniLMJudge), vectorised: an item is met when its criterion
    # and some statement of the reply have cosine >= threshold.
    # calibration: training-split base rollouts graded on the generated rubrics
    train_rubrics = {r["prompt_id"]: json.loads(r["rubrics"])
                     for r in read_table(ctx.inputs["generate_rubrics"] / "rubrics.parquet").to_pylist()}
    base = read_table(ctx.inputs["difficulty_filter"] / "base_rollouts.parquet").to_pylist()[: a.max_train_examples]
    test = {c["prompt_id"]: c for c in read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()
            if c["split"] == "test"}
    responses = read_table(ctx.inputs["evaluate"] / "responses.parquet").to_pylist()

    def max_sims(pairs: list[tuple[str, str]]) -> np.ndarray:
        crit = sorted({c for c, _ in pairs})
        sents = sorted({s for _, r in pairs for s in split_statements(r)} | set(PHRASES.values()))
        ce, se = embed(crit), embed(sents)
        ci, si = {c: i for i, c in enumerate(crit)}, {s: i for i, s in enumerate(sents)}
        sim = ce @ se.T
        return np.asarray([max((sim[ci[c], si[s]] for s in split_statements(r)), default=0.0) for c, r in pairs])

    cal_pairs, cal_rule = [], []
    for row in base:
        items = train_rubrics[row["prompt_id"]]
        cal_pairs += [(it["criterion"], row["response"]) for it in items]
        cal_rule += json.loads(row["met"])
    cal_sims = max_sims(cal_pairs)
    kappas = {t: cohen_kappa(cal_rule, cal_sims >= t) for t in a.thresholds}
    threshold = max(kappas, key=lambda t: (kappas[t], -t))

    pairs, rule, owner, examples = [], [], [], {}
    for row in responses:
        items = json.loads(test[row["prompt_id"]]["rubrics"])
        pairs += [(it["criterion"], row["response"]) for it in items]
        rule += json.loads(row["met"])
        owner += [row["variant"]] * len(items)
    sims = max_sims(pairs)
    mini = sims >= threshold
    rule, owner = np.asarray(rule, bool), np.asarray(owner)
    out = {"threshold": float(threshold), "kappa_train_calibration": float(kappas[threshold]),
           "kappa_heldout": float(cohen_kappa(rule, mini)), "agreement_heldout": float(np.mean(rule == mini)),
           "n_judgements": int(len(rule))}
    for v in sorted(set(owner)):
        sel = owner == v
        out[f"kappa_{v}"] = float(cohen_kappa(rule[sel], mini[sel]))
    # the HealthBench score of every variant under the MiniLM judge (does the ranking hold?)
    pos = 0
    by_variant: dict[str, list[float]] = {}
    for row in responses:
        items = json.loads(test[row["prompt_id"]]["rubrics"])
        met = mini[pos:pos + len(items)]
        pos += len(items)
        s = example_score([it["points"] for it in items], met)
        if s is not None:
            by_variant.setdefault(row["variant"], []).append(s)
    for v, vals in sorted(by_variant.items()):
        out[f"minilm_score_{v}"] = float(np.clip(np.mean(vals), 0, 1))
    write_json_atomic(ctx.out_dir / "agreement.json", {**out, "calibration_kappas": kappas})
    ctx.write_metrics(out)

