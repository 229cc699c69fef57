"""Stage grpo_train (fan-out variant x seed): GRPO from the base policy at one fixed budget,
through the shared TRL path (``components.common.lm_rl.grpo_train``). Paper profile: TRL's vLLM
rollouts when vLLM and a GPU are present (vLLM is not installed in this project, so that path
is untested and rollouts are transformers ``generate``). Memory at paper scale: micro-batches
with gradient accumulation, a bounded generation batch and activation checkpointing
(``grpo.micro_batch`` / ``generation_batch`` / ``gradient_checkpointing``), and fp32 master
weights for a checkpoint policy (``grpo.train_dtype``); the small profile uses none of them.

Variants: ``orbit_review`` (case rubrics, stochastic_review curriculum), ``orbit_admission``
(case rubrics, curriculum_admission), ``orbit_all`` (case rubrics, every item in the reward),
``generic`` (one case-independent rubric for every prompt: the baseline). All share prompts,
steps, group size, optimiser and seed.
"""
from __future__ import annotations

import json
import tempfile

import numpy as np
import torch

from components.common.io import read_json, read_table, write_table
from components.common.generation import vllm_available
from components.common.lm_rl import grpo_train
from components.common.seeds import seed_everything
from components.orbit.grpo import Case, RewardSettings, RubricReward, item_judge
from components.orbit.lm_policy import load_lm_policy

VARIANTS = {"orbit_review": "stochastic_review", "orbit_admission": "curriculum_admission",
            "orbit_all": "none", "generic": "none"}


def training_cases(variant: str, filtered: list[dict], prompts: dict[str, list[dict]],
                   generic: list[dict]) -> list[Case]:
    if variant not in VARIANTS:
        raise ValueError(f"unknown grpo variant {variant!r}; choose from {tuple(VARIANTS)}")
    if variant == "generic":
        return [Case(prompts[r["prompt_id"]], generic, list(range(len(generic)))) for r in filtered]
    return [Case(prompts[r["prompt_id"]], json.loads(r["rubrics"]), json.loads(r["sorted_rubric_indices"]),
                 json.loads(r["item_success"])) for r in filtered]


def reward_settings(g, variant: str, max_response: int) -> RewardSettings:
    return RewardSettings(
        curriculum=VARIANTS[variant], max_response=max_response, overlong_buffer=g.overlong_buffer,
        overlong_factor=g.overlong_factor, reward_policy=g.reward_policy, window=g.window, alpha=g.alpha,
        mastery=g.mastery, gate=g.gate, review_window=g.review_window, review_ratio=g.review_ratio,
        min_weight=g.min_weight, weight_power=g.weight_power)


def grpo_train_stage(cfg, ctx) -> None:
    g = cfg.grpo
    variant, seed = ctx.item["variant"], int(ctx.item["seed"])
    torch.set_num_threads(1)
    seed_everything(seed)
    policy = load_lm_policy(ctx.inputs["train_base"] / "policy", dtype=g.train_dtype)
    cases = read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()
    prompts = {c["prompt_id"]: json.loads(c["prompt"]) for c in cases if c["split"] == "train"}
    filtered = read_table(ctx.inputs["difficulty_filter"] / "filtered.parquet").to_pylist()
    generic = read_json(ctx.inputs["generate_rubrics"] / "generic_rubric.json")
    train_cases = training_cases(variant, filtered, prompts, generic)
    judge = item_judge(cfg.judge)
    reward = RubricReward(train_cases, reward_settings(g, variant, policy.max_response), seed, policy.parse, judge)
    rows = [{"prompt": policy.messages(c.prompt), "case_index": i} for i, c in enumerate(train_cases)]
    use_vllm = policy.style == "text" and vllm_available()
    # generation_batch bounds transformers' KV cache; vLLM pages its cache, so it samples the whole step
    gen_batch = None if use_vllm else (g.generation_batch or None)
    with tempfile.TemporaryDirectory() as tmp:
        result = grpo_train(policy.model, policy.tokenizer, rows, reward, tmp, steps=g.steps,
                            group_size=g.group_size, prompts_per_step=g.prompts_per_step,
                            max_new_tokens=policy.max_response, lr=g.lr, beta=0.0, temperature=g.temperature,
                            seed=seed, loss_type="dapo", epsilon=g.clip_low, epsilon_high=g.clip_high,
                            top_p=g.top_p, use_vllm=use_vllm, micro_batch=g.micro_batch or None,
                            generation_batch=gen_batch, gradient_checkpointing=g.gradient_checkpointing)
    policy.model = result.model.eval()
    for step, rec in enumerate(reward.records, 1):
        ctx.log_metrics({f"grpo/{k}": v for k, v in rec.items()}, step)
    policy.save(ctx.out_dir / "policy")
    hist = reward.records
    keys = sorted({k for h in hist for k in h})
    write_table(ctx.out_dir / "history.parquet", {k: [float(h.get(k, np.nan)) for h in hist] for k in keys})
    ctx.write_metrics({"variant": variant, "seed": seed, "n_cases": len(train_cases), **reward.summary(),
                       **({"judge_calls": judge.calls} if judge.calls else {})})
