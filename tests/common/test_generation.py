"""Batched sampling: per-token log-probs equal a teacher-forced forward pass, EOS trimming,
greedy decoding, seeded determinism; vLLM only where it can run."""
import pytest
import torch

from components.common.generation import (SamplingParams, TransformersGenerator, sequence_logprobs,
                                          vllm_available)
from components.common.hf_models import load_model, load_tokenizer

PROMPTS = ["the cat", "a small bird sees the", "my friend"]       # different lengths: left padding


@pytest.fixture(scope="module")
def lm(tiny_checkpoints):
    folder = tiny_checkpoints.checkpoint("qwen3")
    return load_model(folder, "causal_lm", device="cpu"), load_tokenizer(folder)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_manual_forward_pass(lm, temperature):
    model, tok = lm
    groups = TransformersGenerator(model, tok, batch_size=4).sample(
        PROMPTS, SamplingParams(max_new_tokens=10, temperature=temperature, num_samples=3, seed=0))
    assert [len(g) for g in groups] == [3, 3, 3]
    for prompt, group in zip(PROMPTS, groups):
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        for c in group:
            assert c.prompt == prompt and len(c.token_ids) == len(c.logprobs) >= 1
            ref = sequence_logprobs(model, prompt_ids, c.token_ids, temperature)
            assert c.logprobs == pytest.approx(ref, abs=1e-4)
            if c.finished:
                assert c.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in c.token_ids[:-1]
            else:
                assert len(c.token_ids) == 10


def test_greedy_takes_the_argmax_and_seeds_repeat(lm):
    model, tok = lm
    gen = TransformersGenerator(model, tok)
    [[greedy]] = gen.sample(["the cat"], SamplingParams(max_new_tokens=4, temperature=0))
    ids = tok("the cat", add_special_tokens=False)["input_ids"]
    for token in greedy.token_ids:
        with torch.no_grad():
            assert token == int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        ids.append(token)
    params = SamplingParams(max_new_tokens=6, num_samples=2, seed=3)
    assert gen.sample(PROMPTS, params) == gen.sample(PROMPTS, params)


@pytest.mark.skipif(not vllm_available(), reason="vLLM needs the vllm package and a GPU")
def test_vllm_backend_logprobs_match_transformers(tiny_checkpoints):
    from components.common.generation import VLLMGenerator

    folder = tiny_checkpoints.checkpoint("qwen3")
    model, tok = load_model(folder, "causal_lm", dtype="float32"), load_tokenizer(folder)
    [[c]] = VLLMGenerator(str(folder), dtype="float32").sample(["the cat"], SamplingParams(max_new_tokens=5, seed=0))
    ref = sequence_logprobs(model, tok("the cat", add_special_tokens=False)["input_ids"], c.token_ids)
    assert c.logprobs == pytest.approx(ref, abs=1e-3)
