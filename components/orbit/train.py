"""Stage grpo_train (fan-out variant x seed): GRPO from the base policy at one fixed budget.

Variants: ``orbit_curriculum`` (case rubrics, incremental curriculum: the paper's method),
``orbit_all`` (case rubrics, every item in the reward), ``generic`` (one case-independent rubric
for every prompt: the baseline). All share prompts, steps, group size, optimiser and seed.
"""
from __future__ import annotations

import json

import numpy as np
import torch

from components.common.io import load_torch, read_json, read_table, save_torch, write_table
from components.common.seeds import seed_everything
from components.orbit.grpo import Case, GRPOSettings, train_grpo
from components.orbit.policy import load_policy, policy_state

VARIANTS = ("orbit_curriculum", "orbit_all", "generic")


def training_cases(variant: str, filtered: list[dict], prompts: dict[str, list[dict]],
                   generic: list[dict]) -> list[Case]:
    if variant not in VARIANTS:
        raise ValueError(f"unknown grpo variant {variant!r}; choose from {VARIANTS}")
    if variant == "generic":
        return [Case(prompts[r["prompt_id"]], generic, list(range(len(generic)))) for r in filtered]
    return [Case(prompts[r["prompt_id"]], json.loads(r["rubrics"]), json.loads(r["sorted_rubric_indices"]))
            for r in filtered]


def grpo_train_stage(cfg, ctx) -> None:
    g = cfg.grpo
    variant, seed = ctx.item["variant"], int(ctx.item["seed"])
    torch.set_num_threads(1)
    seed_everything(seed)
    policy = load_policy(load_torch(ctx.inputs["train_base"] / "policy.pt"))
    cases = read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()
    prompts = {c["prompt_id"]: json.loads(c["prompt"]) for c in cases if c["split"] == "train"}
    filtered = read_table(ctx.inputs["difficulty_filter"] / "filtered.parquet").to_pylist()
    generic = read_json(ctx.inputs["generate_rubrics"] / "generic_rubric.json")
    train_cases = training_cases(variant, filtered, prompts, generic)
    settings = GRPOSettings(
        steps=g.steps, prompts_per_step=g.prompts_per_step, group_size=g.group_size, lr=g.lr,
        clip_low=g.clip_low, clip_high=g.clip_high, minibatches=g.minibatches, temperature=g.temperature,
        max_gen_batches=g.max_gen_batches, overlong_buffer=g.overlong_buffer,
        overlong_factor=g.overlong_factor, reward_policy=g.reward_policy,
        curriculum=variant == "orbit_curriculum", window=g.window, alpha=g.alpha, mastery=g.mastery,
        gate=g.gate)
    summary = train_grpo(policy, train_cases, settings, seed,
                         log=lambda rec, step: ctx.log_metrics({f"grpo/{k}": v for k, v in rec.items()}, step),
                         progress=ctx.progress)
    save_torch(ctx.out_dir / "policy.pt", policy_state(policy))
    hist = summary.pop("history")
    keys = sorted({k for h in hist for k in h})
    write_table(ctx.out_dir / "history.parquet", {k: [float(h.get(k, np.nan)) for h in hist] for k in keys})
    ctx.write_metrics({"variant": variant, "seed": seed, "n_cases": len(train_cases), **summary})
