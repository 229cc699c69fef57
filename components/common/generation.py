"""Batched sampling with per-token log-probs, behind one interface.

``Completion.logprobs[i]`` is log p(token_i | prompt, tokens_<i) under the *sampling*
distribution before truncation: log-softmax of the logits divided by the temperature (top-k /
top-p only restrict which tokens can be drawn). RL methods need exactly this for importance
ratios; at temperature 1 it is the model's own log-likelihood.

Backends:
- ``TransformersGenerator`` (default): ``model.generate`` with left padding; runs on CPU.
- ``VLLMGenerator``: vLLM, only when it is installed and a GPU is visible (import guarded).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass
class Completion:
    prompt: str
    text: str
    token_ids: list[int]
    logprobs: list[float]
    finished: bool               # ended with EOS (False: cut at max_new_tokens)

    @property
    def sum_logprob(self) -> float:
        return float(sum(self.logprobs))


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0     # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0               # 0 = no top-k cut
    num_samples: int = 1         # completions per prompt (a GRPO group)
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Generator(Protocol):
    def sample(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """``result[p][k]``: the k-th completion of prompt p."""


class TransformersGenerator:
    def __init__(self, model, tokenizer, batch_size: int = 16):
        self.model, self.tok, self.batch_size = model, tokenizer, batch_size
        if self.tok.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; batched generation needs one")

    @torch.no_grad()
    def sample(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        if params.seed is not None:
            torch.manual_seed(params.seed)
        flat = [p for p in prompts for _ in range(params.num_samples)]
        out: list[Completion] = []
        for start in range(0, len(flat), self.batch_size):
            out += self._batch(flat[start:start + self.batch_size], params)
        k = params.num_samples
        return [out[i * k:(i + 1) * k] for i in range(len(prompts))]

    def _batch(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        side, self.tok.padding_side = self.tok.padding_side, "left"   # decoder-only: pad on the left
        try:
            enc = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            self.tok.padding_side = side
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items()}
        greedy = params.temperature == 0
        gen = self.model.generate(
            **enc, max_new_tokens=params.max_new_tokens, do_sample=not greedy,
            temperature=None if greedy else params.temperature, top_p=None if greedy else params.top_p,
            top_k=None if greedy or not params.top_k else params.top_k,
            pad_token_id=self.tok.pad_token_id, eos_token_id=self.tok.eos_token_id,
            return_dict_in_generate=True, output_logits=True, **params.extra)
        new_tokens = gen.sequences[:, enc["input_ids"].shape[1]:]
        logits = torch.stack(gen.logits, dim=1).float()               # raw, before any warper
        scale = 1.0 if greedy else params.temperature
        logp = torch.log_softmax(logits / scale, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        return [self._completion(p, new_tokens[i], logp[i]) for i, p in enumerate(prompts)]

    def _completion(self, prompt: str, tokens: torch.Tensor, logp: torch.Tensor) -> Completion:
        ids = tokens.tolist()
        eos = self.tok.eos_token_id
        finished = eos in ids
        n = ids.index(eos) + 1 if finished else len(ids)              # keep EOS, drop the padding after it
        return Completion(prompt=prompt, text=self.tok.decode(ids[:n], skip_special_tokens=True),
                          token_ids=ids[:n], logprobs=logp[:n].tolist(), finished=finished)


@torch.no_grad()
def sequence_logprobs(model, prompt_ids: list[int], completion_ids: list[int],
                      temperature: float = 1.0) -> list[float]:
    """Per-token log-probs of ``completion_ids`` after ``prompt_ids`` by one teacher-forced
    forward pass (the reference the generator's log-probs must equal)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids + completion_ids], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return logp.gather(-1, torch.tensor(completion_ids, device=device).unsqueeze(-1)).squeeze(-1).tolist()


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


class VLLMGenerator:
    """vLLM backend for paper-scale rollouts (GPU only). Log-probs are requested as processed
    (temperature-scaled) log-probs so they mean the same as the transformers backend's."""

    def __init__(self, model_path: str, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.85,
                 **engine_kwargs: Any):
        if not vllm_available():
            raise RuntimeError("vLLM backend needs the vllm package and a CUDA device")
        from vllm import LLM

        self.llm = LLM(model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                       logprobs_mode="processed_logprobs", **engine_kwargs)

    def sample(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        from vllm import SamplingParams as VParams

        vp = VParams(n=params.num_samples, max_tokens=params.max_new_tokens, temperature=params.temperature,
                     top_p=params.top_p, top_k=params.top_k or -1, seed=params.seed, logprobs=0)
        results = []
        for prompt, request in zip(prompts, self.llm.generate(prompts, vp)):
            group = []
            for out in request.outputs:
                lps = [step[tok].logprob for step, tok in zip(out.logprobs, out.token_ids)]
                group.append(Completion(prompt=prompt, text=out.text, token_ids=list(out.token_ids),
                                        logprobs=lps, finished=out.finish_reason == "stop"))
            results.append(group)
        return results


def make_generator(model=None, tokenizer=None, backend: str = "transformers", model_path: str = "",
                   **kwargs: Any) -> Generator:
    if backend == "transformers":
        return TransformersGenerator(model, tokenizer, **kwargs)
    if backend == "vllm":
        return VLLMGenerator(model_path, **kwargs)
    raise ValueError(f"unknown generation backend {backend!r} (transformers, vllm)")
