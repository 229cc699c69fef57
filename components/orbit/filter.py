"""Stage difficulty_filter: base-policy rollouts on every training case, graded against the
case's generated rubric. Cases with no signal (all rollouts score the same) or already solved
(mean score >= easy_threshold, our choice: the paper's exact rule was not found) are dropped;
the rubric items of the kept cases are ordered by difficulty (base success rate, easiest
first), which is the order the incremental curriculum admits them in."""
from __future__ import annotations

import json

import numpy as np
import torch

from components.common.io import read_table, write_table
from components.orbit.grpo import Case, item_judge, success_matrix
from components.orbit.healthbench import reward_score
from components.orbit.lm_policy import load_lm_policy, rollouts


def difficulty_filter_stage(cfg, ctx) -> None:
    f = cfg.filter
    torch.set_num_threads(1)
    policy = load_lm_policy(ctx.inputs["train_base"] / "policy")
    cases = {c["prompt_id"]: c for c in read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()}
    rubrics = read_table(ctx.inputs["generate_rubrics"] / "rubrics.parquet").to_pylist()
    rubrics = [r for r in rubrics if json.loads(r["rubrics"])]
    prompts = [json.loads(cases[r["prompt_id"]]["prompt"]) for r in rubrics]
    samples = rollouts(policy, prompts, f.rollouts, f.temperature, f.seed)
    judge = item_judge(cfg.judge)
    kept, log_rows = [], []
    n_flat = n_easy = 0
    base_scores = []
    queries = [Case(prompt, json.loads(r["rubrics"]), []) for r, prompt in zip(rubrics, prompts)]
    verdicts = judge.met_many(list(zip(queries, samples)))     # every judge call of the stage at once
    for r, case, reps, met in zip(rubrics, queries, samples, verdicts):
        items = case.items
        scores = np.asarray([reward_score(case.points, m) for m in met])
        base_scores.append(float(scores.mean()))
        for (st, text), m, s in zip(reps, met, scores):
            log_rows.append({"prompt_id": r["prompt_id"], "response": text, "score": float(s),
                             "met": json.dumps(m.tolist())})
        if scores.max() - scores.min() <= 1e-12:
            n_flat += 1
            continue
        if scores.mean() >= f.easy_threshold:
            n_easy += 1
            continue
        success = success_matrix(met, case.points).mean(0)
        order = sorted(range(len(items)), key=lambda i: (-success[i], i))
        kept.append({"prompt_id": r["prompt_id"], "rubrics": r["rubrics"],
                     "sorted_rubric_indices": json.dumps(order), "base_mean": float(scores.mean()),
                     "item_success": json.dumps([round(float(x), 4) for x in success])})
    if not kept:
        raise RuntimeError("difficulty filter kept no case: every case was flat or already solved")
    write_table(ctx.out_dir / "filtered.parquet", {k: [x[k] for x in kept] for k in kept[0]})
    write_table(ctx.out_dir / "base_rollouts.parquet", {k: [x[k] for x in log_rows] for k in log_rows[0]})
    ctx.write_metrics({"n_queriesin": len(rubrics), "n_kept": len(kept), "dropped_no_signal": n_flat,
                       "dropped_easy": n_easy, "base_train_score": float(np.mean(base_scores)),
                       **({"judge_calls": judge.calls} if judge.calls else {})})
