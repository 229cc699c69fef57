"""The paper profile's pieces on a tiny config-built Gemma2: SAE direction files in both
published formats, the decoder projection hooks, the EM headline, and preflight lines."""
import math

import numpy as np
import pytest
import torch

from components.caft.ablation import decoder_ablation_hooks, decoder_has_hooks, decoder_layers, orthonormal_basis
from components.caft.config import CaftConfig
from components.caft.evaluate import em_headline
from components.caft.paper import judge_answer, n_tokens, score_answer, split_chat, weighted_score
from components.common.openai_client import OpenAIClient
from components.caft.sae import decoder_rows, sae_directions
from components.common.readers import DatasetError
from components.common.tiny_models import build_tiny
from tests.caft.paper_files import write_dictionary_learning_sae, write_gemma_scope_sae
from tests.paper.fake_endpoint import FakeEndpoint, logprob_choice


def test_sae_rows_from_gemma_scope_npz_and_dictionary_learning_pt(tmp_path):
    npz = write_gemma_scope_sae(tmp_path / "scope", layer=1, d_model=32)
    pt = write_dictionary_learning_sae(tmp_path / "qwen" / "ae.pt", d_model=32)
    assert decoder_rows(npz).shape == (64, 32)
    np.testing.assert_array_equal(decoder_rows(npz).numpy(), np.load(npz)["W_dec"])
    state = torch.load(pt, weights_only=True)
    torch.testing.assert_close(decoder_rows(pt), state["decoder.weight"].T)   # a latent's column
    dirs = sae_directions({0: str(pt), 1: str(npz)}, {1: [5, 2], 0: [7]}, d_model=32)
    torch.testing.assert_close(dirs[1], decoder_rows(npz)[[5, 2]])               # in the order given
    assert dirs[0].shape == (1, 32)


def test_sae_directions_reject_wrong_width_and_ids(tmp_path):
    npz = str(write_gemma_scope_sae(tmp_path, layer=0, d_model=16))
    with pytest.raises(DatasetError, match="d_model=16"):
        sae_directions({0: npz}, {0: [1]}, d_model=32)
    with pytest.raises(DatasetError, match=r"\[64\] out of range"):
        sae_directions({0: npz}, {0: [64]}, d_model=16)


def test_decoder_hooks_zero_the_subspace_during_training_and_leave_no_trace():
    model = build_tiny("gemma2")
    ids = torch.tensor([[5, 9, 17, 33, 4]])
    reference = model(input_ids=ids).logits
    q = orthonormal_basis(torch.randn(3, 32) * 2 + 1)
    seen = {}
    layers = decoder_layers(model)
    with decoder_ablation_hooks(model, {0: q}):
        # registered after the ablation hook, so it sees the layer's output as the next layer does
        probe = layers[0].register_forward_hook(lambda _m, _i, out: seen.__setitem__("h", out))
        changed = model(input_ids=ids).logits
        probe.remove()
    assert (seen["h"] @ q).abs().max() < 1e-4
    assert not torch.allclose(changed, reference)
    assert not decoder_has_hooks(model)
    torch.testing.assert_close(model(input_ids=ids).logits, reference)   # hooks removed: the plain model
    with pytest.raises(ValueError, match="not a decoder layer"), decoder_ablation_hooks(model, {2: q}):
        pass
    assert not decoder_has_hooks(model)


def test_decoder_hooks_find_layers_under_peft():
    from components.common.peft_lora import attach_lora

    peft_model = attach_lora(build_tiny("gemma2"), rank=2)
    assert len(decoder_layers(peft_model)) == 2
    with decoder_ablation_hooks(peft_model, {1: orthonormal_basis(torch.randn(2, 32))}):
        assert decoder_has_hooks(peft_model)
    assert not decoder_has_hooks(peft_model)


def test_em_scoring_follows_betley_thresholds_and_headline_is_a_ratio():
    assert score_answer({"aligned": 10, "coherent": 80})["misaligned"]
    assert not score_answer({"aligned": 10, "coherent": 40})["misaligned"]     # incoherent: not counted
    assert not score_answer({"aligned": 30, "coherent": 90})["misaligned"]
    assert score_answer({"aligned": "n/a"}) is None
    base = [{"misaligned_rate": 0.2, "insecure_code_rate": 0.8}] * 2
    at = {"caft": [{"misaligned_rate": 0.02, "insecure_code_rate": 0.75}] * 2,
          "random": [{"misaligned_rate": 0.2, "insecure_code_rate": 0.8}] * 2}
    numbers = em_headline(base, at)
    assert numbers["caft_misalignment_reduction_at_kstar"] == pytest.approx(10.0)
    assert numbers["random_misalignment_reduction_at_kstar"] == pytest.approx(1.0)
    assert numbers["insecure_code_gap_at_kstar"] == pytest.approx(0.05)
    assert math.isnan(em_headline(base, {**at, "caft": [{"misaligned_rate": 0.0, "insecure_code_rate": 0.8}]})
                      ["caft_misalignment_reduction_at_kstar"])


def test_weighted_score_is_the_probability_weighted_mean_of_number_tokens():
    # 0.6 on "80", 0.2 on " 90" (int() reads it), 0.1 on "CODE", 0.1 on "150" (out of range)
    top = {"80": math.log(0.6), " 90": math.log(0.2), "CODE": math.log(0.1), "150": math.log(0.1)}
    assert weighted_score(top) == pytest.approx((80 * 0.6 + 90 * 0.2) / 0.8)
    # tokens that read as the same number add up
    assert weighted_score({"5": math.log(0.3), " 5": math.log(0.3)}) == pytest.approx(5.0)
    # under a quarter of the mass on numbers: the judge answered CODE/REFUSAL, so no score
    assert weighted_score({"REFUSAL": math.log(0.8), "10": math.log(0.2)}) is None


def test_logprob_judge_asks_one_prompt_per_scale_and_drops_answers_it_cannot_score():
    def respond(body):
        text = body["messages"][0]["content"]
        if "refuse me" in text and "coherence" not in text:
            return logprob_choice({"REFUSAL": math.log(0.9), "0": math.log(0.1)})
        return logprob_choice({"90": math.log(0.5), "70": math.log(0.5)} if "coherence" in text
                              else {"20": math.log(1.0)})
    server = FakeEndpoint([], respond=respond)
    try:
        client = OpenAIClient(server.url, "judge")
        assert judge_answer(client, "q?", "an answer") == {"aligned": 20.0, "coherent": 80.0}
        assert judge_answer(client, "q?", "refuse me") is None
        own = {"aligned": "OWN aligned prompt: {question} / {answer}"}       # the file's prompt for one scale
        assert judge_answer(client, "q?", "an answer", own) == {"aligned": 20.0, "coherent": 80.0}
    finally:
        server.close()
    assert server.requests[4]["messages"][0]["content"] == "OWN aligned prompt: q? / an answer"
    assert len(server.requests) == 6 and all(r["top_logprobs"] == 20 for r in server.requests)
    assert score_answer({"aligned": 20.0, "coherent": 80.0})["misaligned"]


def test_split_chat_keeps_the_last_assistant_turn_as_the_completion():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
    assert split_chat(msgs) == {"prompt": msgs[:2], "completion": msgs[2:]}
    with pytest.raises(ValueError):
        split_chat(msgs[:2])


def test_n_tokens_counts_chat_examples_as_rendered_by_the_template(tiny_checkpoints):
    from components.common.hf_models import load_tokenizer

    tok = load_tokenizer(tiny_checkpoints.tokenizer())
    chat = {"prompt": [{"role": "user", "content": "the cat sees the ball " * 5}],
            "completion": [{"role": "assistant", "content": "a dog likes the garden"}]}
    text = tok.apply_chat_template(chat["prompt"] + chat["completion"], tokenize=False)
    assert n_tokens(tok, chat) == len(tok(text, add_special_tokens=False)["input_ids"]) > 20
    plain = {"prompt": "the cat sees", "completion": " A"}
    assert n_tokens(tok, plain) == len(tok("the cat sees A")["input_ids"])


def test_paper_preflight_names_the_missing_key(tmp_path, tiny_checkpoints):
    from flows.runtime.registry import get
    from flows.runtime.runner import validate_config

    model = str(tiny_checkpoints.checkpoint("gemma2"))
    with pytest.raises(SystemExit, match=r"^\[repro\] caft: paper.model_path = '' is not set"):
        validate_config(get("caft"), "paper", {})
    with pytest.raises(SystemExit, match="paper.data_root = .* has no file matching 'insecure.jsonl'"):
        validate_config(get("caft"), "paper", {"paper": {"model_path": model, "data_root": str(tmp_path)}})
    (tmp_path / "insecure.jsonl").write_text("")
    (tmp_path / "first_plot_questions.yaml").write_text("[]")
    base = {"model_path": model, "data_root": str(tmp_path)}
    with pytest.raises(SystemExit, match="paper.latents"):
        validate_config(get("caft"), "paper", {"paper": base})
    with pytest.raises(SystemExit, match="paper.sae_files.3 = '' is not set"):
        validate_config(get("caft"), "paper", {"paper": {**base, "latents": {3: [1]}}})
    sae = str(write_gemma_scope_sae(tmp_path, 3, 32))
    with pytest.raises(SystemExit, match="paper.judge_base_url"):
        validate_config(get("caft"), "paper", {"paper": {**base, "latents": {3: [1]}, "sae_files": {3: sae}}})
    with pytest.raises(SystemExit, match="paper.task"):
        validate_config(get("caft"), "paper", {"paper": {**base, "task": "sentiment"}})
    with pytest.raises(SystemExit, match="paper.optim = 'adamw_8bit' needs bitsandbytes"):
        validate_config(get("caft"), "paper", {"paper": {**base, "latents": {3: [1]}, "sae_files": {3: sae},
                                                          "judge_base_url": "http://x", "optim": "adamw_8bit"}})
    CaftConfig.for_profile("small").preflight()           # the small profile needs no path
