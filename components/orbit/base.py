"""Stage train_base: the "base model" — a tiny Qwen3-architecture causal LM (built from
``Qwen3Config`` by ``components.common.tiny_models``) with a word-level tokenizer over the
synthetic world, pre-trained here on mediocre, case-independent replies (mostly filler, some
generic advice, a sprinkle of every other statement), so it scores low and RL has room.

Paper profile: the base is the user's instruction-tuned checkpoint (Qwen3-4B-Instruct-2507 in
``paper.policy_path``), used as it is: the stage checks that it loads and generates, and writes a
reference to it (not an 8 GB copy) with the free-text reply style."""
from __future__ import annotations

import json

import numpy as np
import torch

from components.common.io import read_table
from components.common.seeds import seed_everything
from components.common.tiny_models import build_tiny
from components.common.train import fit
from components.orbit.lm_policy import LMPolicy, build_tokenizer
from components.orbit.ontology import FILLERS, PHRASE_IDS

GENERIC_DECENT = ("empathy", "self_care", "see_clinician", "safety_net")
SFT_GROUP = 8   # replies per prompt in a batch


def mediocre_reply(rng: np.random.Generator, min_len: int, max_len: int, p_filler: float,
                   p_generic: float) -> list[str]:
    """A case-independent reply: mostly filler, some generic advice, occasionally anything."""
    n = int(rng.integers(min_len, max_len + 1))
    out: list[str] = []
    while len(out) < n:
        u = rng.random()
        if u < p_filler:
            pid = FILLERS[rng.integers(len(FILLERS))]
        elif u < p_filler + p_generic:
            pid = GENERIC_DECENT[rng.integers(len(GENERIC_DECENT))]
        else:
            pid = PHRASE_IDS[rng.integers(len(PHRASE_IDS))]
        if pid not in out:
            out.append(pid)
    return out


def sft_batch(policy: LMPolicy, prompt_ids: list[list[int]], replies: list[list[int]]):
    """Right-padded prompt + reply sequences; the loss sees reply tokens (and EOS) only."""
    pad = policy.tokenizer.pad_token_id
    seqs = [p + r for p, r in zip(prompt_ids, replies)]
    width = max(map(len, seqs))
    x = torch.full((len(seqs), width), pad)
    labels = torch.full((len(seqs), width), -100)
    for b, (p, s) in enumerate(zip(prompt_ids, seqs)):
        x[b, :len(s)] = torch.tensor(s)
        labels[b, len(p):len(s)] = torch.tensor(s[len(p):])
    attn = torch.arange(width)[None, :] < torch.tensor([len(s) for s in seqs])[:, None]
    return x, attn, labels


def sft_loss(model, batch) -> torch.Tensor:
    x, attn, labels = batch
    return model(input_ids=x, attention_mask=attn.long(), labels=labels).loss


def base_policy(p, train_prompts: list[list[dict]], vocab_prompts: list[list[dict]]) -> LMPolicy:
    tok = build_tokenizer(vocab_prompts)
    model = build_tiny("qwen3", seed=p.seed, vocab_size=len(tok), hidden_size=p.d_model,
                       intermediate_size=4 * p.d_model, num_hidden_layers=p.n_layers,
                       num_attention_heads=p.n_heads, num_key_value_heads=max(1, p.n_heads // 2),
                       head_dim=p.d_model // p.n_heads, max_position_embeddings=128)
    return LMPolicy(model, tok, p.max_response)


def paper_base_stage(cfg, ctx) -> None:
    """Reference the paper's checkpoint; load it once on its device and answer one training
    prompt, so a broken checkpoint fails here rather than in the filter."""
    from components.orbit.lm_policy import load_lm_policy, write_policy_ref

    folder = ctx.out_dir / "policy"
    write_policy_ref(folder, cfg.policy.max_response, "text", cfg.paper.device, source=cfg.paper.policy_path)
    policy = load_lm_policy(folder)
    cases = read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()
    prompt = next(json.loads(c["prompt"]) for c in cases if c["split"] == "train")
    torch.manual_seed(cfg.policy.seed)
    policy.max_response = min(policy.max_response, 16)       # a probe, not a rollout
    probe = policy.sample([prompt], 1, temperature=0.0)[0]
    ctx.write_metrics({"n_params": int(sum(t.numel() for t in policy.model.parameters())),
                       "vocab_size": len(policy.tokenizer), "architecture": type(policy.model).__name__,
                       "device": str(next(policy.model.parameters()).device),
                       "dtype": str(next(policy.model.parameters()).dtype), "probe_chars": len(probe)})


def train_base_stage(cfg, ctx) -> None:
    p = cfg.policy
    if cfg.paper.enabled:
        return paper_base_stage(cfg, ctx)
    torch.set_num_threads(1)
    seed_everything(p.seed)
    cases = read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()
    prompts = [json.loads(c["prompt"]) for c in cases if c["split"] == "train"]
    vocab_prompts = [json.loads(c["prompt"]) for c in cases if c["split"] in ("train", "seed_pool")]
    policy = base_policy(p, prompts, vocab_prompts)
    prompt_ids = [policy.prompt_ids(q) for q in prompts]
    rng = np.random.default_rng(p.seed)

    def batches():
        while True:
            idx = np.repeat(rng.integers(len(prompts), size=max(1, p.sft_batch // SFT_GROUP)), SFT_GROUP)
            replies = [policy.reply_ids(mediocre_reply(rng, p.reply_min, min(p.reply_max, p.max_response - 1),
                                                       p.p_filler, p.p_generic)) for _ in idx]
            yield sft_batch(policy, [prompt_ids[i] for i in idx], replies)

    policy.model.train()
    records = fit(policy.model, batches(), sft_loss, steps=p.sft_steps, lr=p.sft_lr, warmup=p.sft_steps // 10,
                  ctx=ctx, prefix="sft", log_every=20)
    policy.model.eval()
    policy.save(ctx.out_dir / "policy")
    ctx.write_metrics({"final_loss": records[-1]["sft/loss"],
                       "n_params": int(sum(t.numel() for t in policy.model.parameters())),
                       "vocab_size": len(policy.tokenizer), "architecture": type(policy.model).__name__})
