"""Cost of one paper-shape PPO update per memory variant, measured on this machine:
``python -m components.linrnn.cost VARIANT ...`` (one thread, CPU unless a GPU is visible).

One update = collecting n_envs x rollout_len steps, then ppo_epochs x minibatches gradient
steps; this times the collection once and the first epoch's minibatches, and scales to a run.
"""
from __future__ import annotations

import sys
import time

import torch

from components.linrnn import ppo
from components.linrnn.config import LinrnnConfig


def update_seconds(variant: str, p) -> dict[str, float]:
    rng, env, memory, model, optimizer, run = ppo.start_run(variant, 0, p)
    started = time.perf_counter()
    batch = ppo.collect(env, memory, model, p, run, 0, rng)
    collect = time.perf_counter() - started
    started = time.perf_counter()
    ppo.ppo_update(model, optimizer, batch, p.model_copy(update={"ppo_epochs": 1}), rng)
    if run["device"].type == "cuda":
        torch.cuda.synchronize()
    minibatch = (time.perf_counter() - started) / p.minibatches
    update = collect + minibatch * p.ppo_epochs * p.minibatches
    updates = ppo.trained_steps(p) // (p.n_envs * p.rollout_len)
    return {"collect_s": collect, "minibatch_s": minibatch, "update_s": update, "run_hours": updates * update / 3600}


def main(variants: list[str]) -> None:
    torch.set_num_threads(1)
    p = LinrnnConfig.for_profile("paper").ringworld
    for variant in variants:
        c = update_seconds(variant, p)
        print(f"{variant}: collect {c['collect_s']:.2f} s, minibatch {c['minibatch_s'] * 1000:.0f} ms, "
              f"update {c['update_s']:.1f} s, one run {c['run_hours']:.1f} h", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
