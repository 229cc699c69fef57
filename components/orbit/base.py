"""Stage train_base: the "base model" — the small decoder trained from scratch on mediocre,
case-independent replies (see components.orbit.policy)."""
from __future__ import annotations

import json

import numpy as np
import torch

from components.common.io import read_table, save_torch
from components.common.seeds import seed_everything
from components.common.train import fit
from components.orbit.policy import (EOS, Vocab, build_policy, mediocre_reply, policy_state,
                                     response_mask, vocab_words)


def require_tiny(p) -> None:
    if p.kind != "tiny":
        raise NotImplementedError(
            "orbit: policy.kind = 'lm' is not wired into the pipeline stages yet; the embedded "
            "profiles use the tiny decoder (see CLAIMS.md, 'Differs')")


SFT_GROUP = 8   # replies per prompt in a batch: the prompt is encoded once for all of them


def sft_loss(policy, batch) -> torch.Tensor:
    x, y = batch
    logp = policy.group_logprobs(x, y, SFT_GROUP)
    mask = response_mask(y)
    return -(logp * mask).sum() / mask.sum()


def train_base_stage(cfg, ctx) -> None:
    p = cfg.policy
    require_tiny(p)
    torch.set_num_threads(1)
    seed_everything(p.seed)
    cases = read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()
    prompts = [json.loads(c["prompt"]) for c in cases if c["split"] == "train"]
    words = vocab_words([json.loads(c["prompt"]) for c in cases if c["split"] in ("train", "seed_pool")])
    hp = {"d_model": p.d_model, "n_layers": p.n_layers, "n_heads": p.n_heads, "prompt_len": p.prompt_len,
          "max_response": p.max_response}
    policy = build_policy(Vocab(words), hp)
    x_all = policy.encode(prompts)
    rng = np.random.default_rng(p.seed)

    def batches():
        while True:
            idx = rng.integers(len(prompts), size=max(1, p.sft_batch // SFT_GROUP))
            y = torch.full((len(idx) * SFT_GROUP, p.max_response), EOS)
            for b in range(len(y)):
                reply = mediocre_reply(rng, p.reply_min, min(p.reply_max, p.max_response - 1), p.p_filler,
                                       p.p_generic)
                y[b, :len(reply)] = torch.tensor([policy.vocab.phrase_token(r) for r in reply])
            yield x_all[torch.from_numpy(idx)], y

    records = fit(policy, batches(), sft_loss, steps=p.sft_steps, lr=p.sft_lr, warmup=p.sft_steps // 10,
                  ctx=ctx, prefix="sft", log_every=20)
    save_torch(ctx.out_dir / "policy.pt", policy_state(policy))
    n_params = sum(t.numel() for t in {id(t): t for t in policy.parameters()}.values())
    ctx.write_metrics({"final_loss": records[-1]["sft/loss"], "n_params": int(n_params),
                       "vocab_size": len(policy.vocab)})
