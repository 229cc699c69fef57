"""RL and preference optimisation of language models through TRL: one shared path for GRPO
(``GRPOTrainer`` with the method's own reward functions) and DPO (``DPOTrainer``).

A method supplies prompts and a reward function ``reward(prompts, completions, **columns) ->
list[float]`` (extra dataset columns, e.g. a reference answer or a rubric, arrive as keyword
lists); everything else — sampling groups, group-normalised advantages, the clipped objective,
the KL to a reference, the optimizer — is TRL's. The same call trains a tiny config-built model
on CPU in seconds (tests, small profiles) and a real checkpoint on GPUs (paper profiles; set
``use_vllm`` for vLLM rollouts there).

Memory at paper scale (a 4B policy, thousands of tokens per reply): ``micro_batch`` splits one
optimizer step's rollouts into micro-batches whose gradients TRL accumulates
(``gradient_accumulation_steps``), ``gradient_checkpointing`` recomputes activations in the
backward pass, and ``generation_batch`` caps how many rollouts one ``generate`` call samples
(TRL's ``generation_batch_size``). The defaults (the whole step in one micro-batch and one
generation call, no checkpointing) are what the small profiles ran before these options existed.

(``components.common.rl`` keeps the hand-written GAE/PPO pieces for the non-LM control tasks.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

Reward = Callable[..., list[float]]


@dataclass
class TrainResult:
    model: Any
    log_history: list[dict[str, Any]] = field(default_factory=list)

    def logged(self, key: str) -> list[float]:
        """Every logged value of ``key`` (e.g. ``"reward"``, ``"loss"``), in step order."""
        return [row[key] for row in self.log_history if key in row]


def _precision() -> dict[str, bool]:
    """bf16 on a GPU that supports it, fp32 on CPU (TRL would otherwise default to bf16)."""
    gpu = torch.cuda.is_available()
    return {"bf16": bool(gpu and torch.cuda.is_bf16_supported()), "fp16": False, "use_cpu": not gpu}


def _common_args(out_dir: Path, steps: int, lr: float, seed: int, logging_steps: int,
                 gradient_checkpointing: bool = False) -> dict[str, Any]:
    return dict(output_dir=str(out_dir), max_steps=steps, learning_rate=lr, seed=seed, data_seed=seed,
                logging_steps=logging_steps, report_to="none", save_strategy="no",
                gradient_checkpointing=gradient_checkpointing,
                lr_scheduler_type="constant", warmup_steps=0, disable_tqdm=True,
                dataloader_num_workers=0, **_precision())


def _train(trainer) -> TrainResult:
    """Train without transformers' PrinterCallback, which prints every logged step as a dict to
    stdout (thousands of lines in a stage's log); the same values stay in the log history."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return TrainResult(trainer.model, list(trainer.state.log_history))


def named_reward(fn: Reward, name: str | None = None) -> Reward:
    """TRL logs each reward function under its ``__name__`` (``rewards/<name>/mean``); give
    partials one, and return plain floats whatever the method's function returns."""
    def reward(prompts, completions, **columns):
        return [float(r) for r in fn(prompts, completions, **columns)]
    reward.__name__ = name or getattr(fn, "__name__", "reward")
    return reward


def grpo_batches(prompts_per_step: int, group_size: int, micro_batch: int | None = None,
                 generation_batch: int | None = None) -> dict[str, int]:
    """TRL's batch settings for one optimizer step of ``prompts_per_step x group_size`` rollouts
    (one process): ``micro_batch`` rollouts per forward/backward (default: all of them), their
    gradients accumulated over ``gradient_accumulation_steps``; ``generation_batch`` rollouts
    sampled per generation call (default: all of them; whole groups, a multiple of the
    micro-batch). TRL samples ``steps_per_generation = generation_batch / micro_batch``
    micro-batches from one generation call, so with a smaller ``generation_batch`` the step is
    generated in several calls, all before the optimizer step (still on-policy)."""
    batch = prompts_per_step * group_size
    micro = micro_batch or batch
    gen = generation_batch or batch
    problems = [f"{name} = {value} must divide the step's {batch} rollouts ({prompts_per_step} prompts x "
                f"{group_size})" for name, value in (("micro_batch", micro), ("generation_batch", gen))
                if value <= 0 or batch % value]
    if not problems and gen % micro:
        problems.append(f"generation_batch = {gen} must be a multiple of micro_batch = {micro}")
    if not problems and gen % group_size:
        problems.append(f"generation_batch = {gen} must hold whole groups of {group_size}")
    if problems:
        raise ValueError("grpo_train: " + "; ".join(problems))
    return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": batch // micro,
            "generation_batch_size": gen}


def grpo_train(model, tokenizer, rows: list[dict[str, Any]], rewards: Reward | list[Reward], out_dir: str | Path,
               *, steps: int, group_size: int = 4, prompts_per_step: int = 2, max_new_tokens: int = 32,
               lr: float = 1e-6, beta: float = 0.0, temperature: float = 1.0, seed: int = 0,
               loss_type: str = "grpo", scale_rewards: str = "group", peft_config=None,
               use_vllm: bool = False, logging_steps: int = 1, micro_batch: int | None = None,
               generation_batch: int | None = None, gradient_checkpointing: bool = False,
               **grpo_args: Any) -> TrainResult:
    """GRPO on ``rows`` (each a dict with ``"prompt"``: text or chat messages, plus any columns
    the reward reads). ``prompts_per_step x group_size`` completions per optimizer step, in
    micro-batches of ``micro_batch`` (see ``grpo_batches``). With the ``"dapo"`` loss (token
    mean) or the ``"grpo"`` loss, accumulating equal micro-batches gives the gradient of the
    whole step; with ``generation_batch`` below the step, ``"dapo"`` normalises each generation
    call by its own token count (TRL), a mean of per-call token means."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    funcs = [named_reward(r) for r in (rewards if isinstance(rewards, list) else [rewards])]
    config = GRPOConfig(**_common_args(Path(out_dir), steps, lr, seed, logging_steps, gradient_checkpointing),
                        **grpo_batches(prompts_per_step, group_size, micro_batch, generation_batch),
                        num_generations=group_size, max_completion_length=max_new_tokens,
                        temperature=temperature, beta=beta, loss_type=loss_type, scale_rewards=scale_rewards,
                        use_vllm=use_vllm, **grpo_args)
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=config, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, peft_config=peft_config)
    return _train(trainer)


def dpo_train(model, tokenizer, pairs: list[dict[str, Any]], out_dir: str | Path, *, steps: int,
              batch_size: int = 4, lr: float = 1e-6, beta: float = 0.1, loss_type: str = "sigmoid",
              max_length: int | None = 512, ref_model=None, seed: int = 0, peft_config=None,
              logging_steps: int = 1, gradient_checkpointing: bool = False, **dpo_args: Any) -> TrainResult:
    """DPO on ``pairs`` (each ``{"prompt", "chosen", "rejected"}``, text or chat messages).
    Without ``ref_model`` the reference is a frozen copy of the starting model (under peft: the
    adapter-free base). TRL would re-load it from ``config._name_or_path``, which a config-built
    model does not have, so the copy is made here."""
    import copy

    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    if ref_model is None and peft_config is None and not hasattr(model, "peft_config"):
        ref_model = copy.deepcopy(model).eval()

    config = DPOConfig(**_common_args(Path(out_dir), steps, lr, seed, logging_steps, gradient_checkpointing),
                       per_device_train_batch_size=batch_size, beta=beta, loss_type=[loss_type],
                       max_length=max_length, **dpo_args)
    trainer = DPOTrainer(model=model, ref_model=ref_model, args=config, train_dataset=Dataset.from_list(pairs),
                         processing_class=tokenizer, peft_config=peft_config)
    return _train(trainer)
