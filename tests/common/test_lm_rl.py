"""GRPO and DPO through TRL on a tiny Qwen3 on CPU: the reward shapes the policy, columns reach
the reward function, DPO widens the chosen-vs-rejected margin; micro-batches accumulated over a
step and gradient checkpointing give the whole-batch update."""
import pytest
import torch

from components.common.lm_rl import dpo_train, grpo_train
from components.common.tiny_models import build_tiny
from components.common.tiny_tokenizer import train_tokenizer
from tests.paper.checkpoints import corpus

PROMPTS = ["the dog", "a small bird", "my friend", "the river"]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(corpus(), "word", vocab_size=64)


def _next_token_mass(model, tok, token_ids: list[int]) -> float:
    """Exact probability (no sampling) that the first completion token is in ``token_ids``."""
    with torch.no_grad():
        probs = [model(**tok(p, return_tensors="pt")).logits[0, -1].softmax(-1)[token_ids].sum()
                 for p in PROMPTS]
    return float(torch.stack(probs).mean())


def test_grpo_moves_probability_towards_rewarded_tokens(tmp_path, tok):
    model = build_tiny("qwen3", vocab_size=len(tok))
    vocab = tok.get_vocab()
    rewarded = sorted(w for w in vocab if w.isalpha())[::2]      # half of the words: a dense signal
    ids = [vocab[w] for w in rewarded]

    def in_set(prompts, completions, **_):
        return [1.0 if c.split()[:1] and c.split()[0] in rewarded else 0.0 for c in completions]

    before = _next_token_mass(model, tok, ids)
    grpo_train(model, tok, [{"prompt": p} for p in PROMPTS], in_set, tmp_path, steps=12, group_size=8,
               prompts_per_step=2, max_new_tokens=1, lr=3e-2, seed=0)
    after = _next_token_mass(model, tok, ids)
    assert after > before + 0.1, (before, after)


def test_grpo_reward_sees_groups_and_dataset_columns(tmp_path, tok, capsys):
    model = build_tiny("qwen3", vocab_size=len(tok))
    calls = []

    def length_reward(prompts, completions, target, **_):
        calls.append((list(prompts), list(completions), list(target)))
        return [-abs(len(c.split()) - t) for c, t in zip(completions, target)]

    rows = [{"prompt": p, "target": 3} for p in PROMPTS]
    result = grpo_train(model, tok, rows, length_reward, tmp_path, steps=2, group_size=4, prompts_per_step=2,
                        max_new_tokens=6, lr=1e-3, seed=0)
    assert len(calls) == 2
    for prompts, completions, target in calls:
        assert len(completions) == 8 and target == [3] * 8
        assert sorted(set(prompts)) and all(prompts.count(p) == 4 for p in set(prompts))  # whole groups
    assert "'loss'" not in capsys.readouterr().out     # regression: every step's dict was printed
    logged = result.logged("rewards/length_reward/mean")
    expected = [sum(-abs(len(c.split()) - 3) for c in comp) / len(comp) for _, comp, _ in calls]
    assert logged == pytest.approx(expected, abs=1e-4)


def test_dpo_widens_the_chosen_margin(tmp_path, tok):
    model = build_tiny("qwen3", vocab_size=len(tok))
    pairs = [{"prompt": p, "chosen": " the cat sees the ball .", "rejected": " a red house answers !"}
             for p in PROMPTS]
    result = dpo_train(model, tok, pairs, tmp_path, steps=8, batch_size=4, lr=1e-2, beta=0.1, max_length=32)
    margins = result.logged("rewards/margins")
    assert margins[0] == pytest.approx(0.0, abs=1e-3)           # policy == reference at step 1
    assert margins[-1] > 0.5, margins


def _one_step_update(tok, tmp_path, loss_type: str, **batching) -> dict[str, torch.Tensor]:
    """Parameter change of one plain-SGD GRPO step (no clipping: the update is -lr x the gradient,
    so a wrongly scaled accumulation would show) from one fixed tiny Qwen3."""
    torch.manual_seed(0)
    model = build_tiny("qwen3", vocab_size=len(tok))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}

    def n_words(prompts, completions, **_):
        return [float(len(c.split())) for c in completions]

    grpo_train(model, tok, [{"prompt": p} for p in PROMPTS], n_words, tmp_path, steps=1, group_size=4,
               prompts_per_step=2, max_new_tokens=6, lr=1.0, seed=0, loss_type=loss_type, optim="sgd",
               max_grad_norm=0.0, **batching)
    delta = {k: v.detach() - before[k] for k, v in model.named_parameters()}
    delta["checkpointed"] = torch.tensor(any(getattr(m, "gradient_checkpointing", False) is True
                                             for m in model.modules()))
    return delta


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_grpo_accumulating_micro_batches_gives_the_whole_batch_update(tmp_path, tok, loss_type):
    whole = _one_step_update(tok, tmp_path / "whole", loss_type)
    micro = _one_step_update(tok, tmp_path / "micro", loss_type, micro_batch=2)     # 4 accumulated micro-batches
    assert max(float(d.abs().max()) for k, d in whole.items() if k != "checkpointed") > 1e-4   # it moved
    for k in whole:
        torch.testing.assert_close(micro[k], whole[k], rtol=1e-4, atol=1e-6, msg=k)


def test_grpo_gradient_checkpointing_runs_and_gives_the_same_update(tmp_path, tok):
    plain = _one_step_update(tok, tmp_path / "plain", "dapo")
    ckpt = _one_step_update(tok, tmp_path / "ckpt", "dapo", micro_batch=4, gradient_checkpointing=True)
    assert bool(ckpt.pop("checkpointed")) and not bool(plain.pop("checkpointed"))
    for k in plain:
        torch.testing.assert_close(ckpt[k], plain[k], rtol=1e-4, atol=1e-6, msg=k)


def test_grpo_generation_batch_splits_a_step_into_generation_calls(tmp_path, tok):
    model = build_tiny("qwen3", vocab_size=len(tok))
    sizes = []

    def reward(prompts, completions, **_):
        sizes.append(len(completions))
        return [float(len(c)) for c in completions]

    grpo_train(model, tok, [{"prompt": p} for p in PROMPTS], reward, tmp_path, steps=2, group_size=4,
               prompts_per_step=2, max_new_tokens=4, lr=1e-3, micro_batch=2, generation_batch=4)
    assert sizes == [4, 4, 4, 4]            # two whole groups per call, two calls per optimizer step


def test_grpo_batches_defaults_and_errors():
    from components.common.lm_rl import grpo_batches

    # the defaults are what the small profiles ran before micro-batching existed: one micro-batch
    assert grpo_batches(8, 8) == {"per_device_train_batch_size": 64, "gradient_accumulation_steps": 1,
                                  "generation_batch_size": 64}
    assert grpo_batches(64, 8, micro_batch=2, generation_batch=64) == {
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 256, "generation_batch_size": 64}
    with pytest.raises(ValueError, match="micro_batch = 3 must divide"):
        grpo_batches(2, 4, micro_batch=3)
    with pytest.raises(ValueError, match="whole groups of 4"):
        grpo_batches(2, 4, micro_batch=2, generation_batch=2)
    with pytest.raises(ValueError, match="multiple of micro_batch"):
        grpo_batches(4, 2, micro_batch=4, generation_batch=2)
