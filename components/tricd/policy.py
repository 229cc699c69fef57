"""TriCD's learned parts: the adaptive perturbation controller (router) and the saliency gater,
trained with REINFORCE on the frozen backbone (official ``optimizer.py`` settings).

Router (official ``QFormerToolRouter``): learnable queries cross-attend twice over the
backbone's final hidden states of the video+question tokens, then twice over each tool's
description tokens; a score head gives one logit per tool. Policy: independent
Bernoulli(sigmoid(logit)) per tool; sampled in training, ``prob > router_threshold`` at eval.
Each tool's description tokens carry a learned tool-identity embedding (official ``tool_id_emb``),
so the router can prefer a tool even where two descriptions read alike.
Gater: MLP on the mean-pooled hidden states -> mu in (0, 1); beta ~ N(mu, train_std) clamped to
[0, 1] in training, beta = mu at eval. The log-probability of beta uses the *unclamped* sample
(the official code's approximation, kept).
Reward +1 / -1 for a correct / wrong calibrated answer; EMA baseline b <- m b + (1 - m) r;
advantage r - b; loss -(log p_router + log p_gater) * advantage, accumulated over
``grad_accum`` queries per AdamW step, gradient clip 1.0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from components.common.transformer import CrossBlock
from components.tricd.decode import as_backbone, calibrate, predict, run_pass
from components.tricd.saliency import pool_to_tokens, token_weights
from components.tricd.tools import TOOL_NAMES, TOOL_TEXT, apply_tools


class ToolRouter(nn.Module):
    def __init__(self, d_in: int, d: int, n_queries: int, tool_tokens: torch.Tensor,
                 tool_pad: torch.Tensor, tool_ids: bool = True, tool_id_std: float = 1.0):
        super().__init__()
        self.register_buffer("tool_tokens", tool_tokens)     # (n_tools, Lt, d_in), frozen
        self.register_buffer("tool_pad", tool_pad)           # (n_tools, Lt) True = padding
        self.in_proj = nn.Linear(d_in, d)
        self.queries = nn.Parameter(0.02 * torch.randn(n_queries, d))
        self.ctx_blocks = nn.ModuleList([CrossBlock(d), CrossBlock(d)])
        self.tool_blocks = nn.ModuleList([CrossBlock(d), CrossBlock(d)])
        self.score = nn.Linear(d, 1)
        # official router: a learned embedding per tool added to its description tokens; without
        # it the only per-tool input is the frozen description, and v1-v3's routers moved all
        # eight tools together (equal frequencies within every seed). ``tool_ids=False`` = v1-v3.
        self.tool_id = nn.Embedding(tool_tokens.shape[0], d) if tool_ids else None
        if self.tool_id is not None:   # N(0, 1) (torch's default, v4) scaled to N(0, tool_id_std^2)
            with torch.no_grad():
                self.tool_id.weight.mul_(tool_id_std)

    def forward(self, hidden: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """(B, L, d_in), (B, L) True = padding -> tool logits (B, n_tools)."""
        b, n_tools = hidden.shape[0], self.tool_tokens.shape[0]
        kv = self.in_proj(hidden.float())   # the paper backbone's states may be bf16
        q = self.queries.expand(b, -1, -1)
        for block in self.ctx_blocks:
            q = block(q, kv, pad)
        tools = self.in_proj(self.tool_tokens)
        if self.tool_id is not None:
            tools = tools + self.tool_id.weight.unsqueeze(1)
        q = q.unsqueeze(1).expand(-1, n_tools, -1, -1).reshape(b * n_tools, *q.shape[1:])
        tkv = tools.unsqueeze(0).expand(b, -1, -1, -1).reshape(b * n_tools, *tools.shape[1:])
        tpad = self.tool_pad.unsqueeze(0).expand(b, -1, -1).reshape(b * n_tools, -1)
        for block in self.tool_blocks:
            q = block(q, tkv, tpad)
        return self.score(q.mean(1)).view(b, n_tools)


class Gater(nn.Module):
    def __init__(self, d_in: int, hidden: tuple[int, int] = (64, 16)):
        super().__init__()  # official 4096 -> 256 -> 64 -> 1 (``policy.gater_hidden``)
        h1, h2 = hidden
        self.net = nn.Sequential(nn.Linear(d_in, h1), nn.GELU(), nn.Linear(h1, h2), nn.GELU(),
                                 nn.Linear(h2, 1))

    def forward(self, hidden: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        keep = (~pad).unsqueeze(-1).float()
        pooled = (hidden.float() * keep).sum(1) / keep.sum(1).clamp_min(1)
        return torch.sigmoid(self.net(pooled)).squeeze(-1)


class Policy(nn.Module):
    def __init__(self, backbone, d_router: int, n_queries: int, gater_hidden=(64, 16), tool_ids: bool = True,
                 tool_id_std: float = 1.0):
        """``backbone``: a ``backbones`` adapter (or a bare ToyVLLM); the tool descriptions are
        read through it once (frozen), as the official code caches them."""
        super().__init__()
        backbone = as_backbone(backbone)
        tokens, pad = backbone.describe([TOOL_TEXT[t] for t in TOOL_NAMES])
        self.router = ToolRouter(backbone.d_model, d_router, n_queries, tokens.float(), pad, tool_ids, tool_id_std)
        self.gater = Gater(backbone.d_model, tuple(gater_hidden))


@dataclass
class Cache:
    """Everything about a split that does not depend on the policy (backbone is frozen)."""
    frames: torch.Tensor       # (N, T, H, W, 3) uint8: the split's videos
    video_idx: torch.Tensor    # (Q,) row -> video
    text: object               # the backbone's encoding of the questions
    tasks: np.ndarray
    answers: np.ndarray
    q_o: torch.Tensor          # (Q, 5) original-pass logits
    hidden: torch.Tensor       # (Q, L, d)
    pad: torch.Tensor          # (Q, L) True = padding token
    w_m: torch.Tensor          # (N, T', P) motion saliency on the token grid, per video
    w_v: torch.Tensor

    def video(self, row: int) -> torch.Tensor:
        return self.frames[int(self.video_idx[row])].float()


def build_cache(backbone, split, saliency: dict) -> Cache:
    backbone = as_backbone(backbone)
    q_o, hidden, pad = run_pass(backbone, split.videos, split.text, hidden=True, video_idx=split.video_idx)
    # saliency pooled to the visual-token grid (the official code pools to the merged tokens)
    pool = saliency.get("pool_px", 1)
    w_m = pool_to_tokens(saliency["motion"].float(), backbone.token_px // pool, backbone.tpatch)
    w_v = pool_to_tokens(saliency["visual"].float(), backbone.token_px // pool, backbone.tpatch)
    return Cache(split.videos, split.video_idx, split.text, split.tasks, split.qa.answer.to_numpy(),
                 q_o, hidden, pad, w_m, w_v)


def negative_logits(backbone, cache: Cache, rows, masks: np.ndarray, tool_cfg, generator) -> torch.Tensor:
    """q_n for the given rows and 0/1 tool masks; rows with no tool get q_n = q_o."""
    rows = np.asarray(rows)
    q_n = cache.q_o[rows].clone()
    active = np.flatnonzero(masks.any(axis=1))
    if len(active):
        neg = torch.stack([apply_tools(cache.video(rows[i]), masks[i], keep=tool_cfg.sample_keep,
                                       shuffle_seed=tool_cfg.shuffle_seed, blur_sigma=tool_cfg.blur_sigma,
                                       noise_std=tool_cfg.noise_std, generator=generator)
                           for i in active])
        q_n[torch.as_tensor(active)] = run_pass(backbone, neg, cache.text[rows[active]])
    return q_n


def positive_logits(backbone, cache: Cache, rows, beta: torch.Tensor) -> torch.Tensor:
    rows = np.asarray(rows)
    vids = cache.video_idx[rows]
    w = token_weights(cache.w_m[vids], cache.w_v[vids], beta.detach()).flatten(1)
    return run_pass(backbone, cache.frames, cache.text[rows], weight=w, video_idx=vids)


@torch.no_grad()
def policy_decisions(policy: Policy, cache: Cache, threshold: float, batch: int = 256):
    """Eval-mode decisions: tool probabilities (Q, n_tools) and gater beta (Q,)."""
    probs, betas = [], []
    for s in range(0, len(cache.text), batch):
        h, p = cache.hidden[s:s + batch], cache.pad[s:s + batch]
        probs.append(torch.sigmoid(policy.router(h, p)))
        betas.append(policy.gater(h, p))
    return torch.cat(probs), torch.cat(betas)


def calibrated_predictions(backbone, cache: Cache, masks: np.ndarray, beta: torch.Tensor,
                           tool_cfg, a1: float, a2: float, seed: int = 0):
    rows = np.arange(len(cache.text))
    gen = torch.Generator().manual_seed(seed)
    q_n = negative_logits(backbone, cache, rows, masks, tool_cfg, gen)
    q_p = positive_logits(backbone, cache, rows, beta) if a1 else cache.q_o
    q = calibrate(cache.q_o, q_p, q_n, a1, a2)
    return predict(q.numpy(), cache.tasks), {"q_o": cache.q_o, "q_p": q_p, "q_n": q_n}


def evaluate_policy(backbone, policy, cache: Cache, pcfg, seed: int = 0) -> tuple[float, np.ndarray]:
    from components.tricd.decode import score

    probs, beta = policy_decisions(policy, cache, pcfg.router_threshold)
    masks = (probs > pcfg.router_threshold).numpy()
    pred, _ = calibrated_predictions(backbone, cache, masks, beta, pcfg, pcfg.a1, pcfg.a2, seed)
    import pandas as pd

    qa = pd.DataFrame({"task": cache.tasks, "answer": cache.answers, "compositional":
                       [t.startswith("c_") for t in cache.tasks], "types": [[]] * len(cache.tasks)})
    return score(qa, pred)["macro"], masks


def collapse_stats(masks: np.ndarray) -> dict:
    """How the router's eval decisions (Q, n_tools) 0/1 spread over the items: shares of items with
    no tool and with every tool, and the share taken by the most common tool set (1.0 = one
    fixed choice for every item, whatever it is: the per-seed collapse check)."""
    masks = np.asarray(masks, dtype=bool)
    _, counts = np.unique(masks, axis=0, return_counts=True)
    return {"zero_tool_share": float((~masks.any(1)).mean()), "all_tools_share": float(masks.all(1).mean()),
            "modal_set_share": float(counts.max() / len(masks)), "n_tool_sets": int(len(counts))}


def reinforce_loss(logp: torch.Tensor, reward: np.ndarray, state: dict, momentum: float,
                   per_query: np.ndarray | None = None) -> torch.Tensor:
    """-(log pi(a)) * (r - b) averaged over the accumulated queries. The EMA baseline is
    updated query by query, before the advantage is taken (order of the official trainer).
    ``per_query``: a baseline per query instead (the EMA is still tracked, for the log)."""
    adv = np.empty(len(reward))
    for i, r in enumerate(reward):
        state["baseline"] = momentum * state["baseline"] + (1 - momentum) * float(r)
        adv[i] = r - (state["baseline"] if per_query is None else per_query[i])
    return -(logp * torch.as_tensor(adv, dtype=torch.float32)).mean()


def bernoulli_logp(probs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return (actions * probs.log() + (1 - actions) * (1 - probs).log()).sum(-1)


def bernoulli_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the per-tool Bernoulli decisions, (B, n_tools) -> scalar."""
    return -(probs * probs.log() + (1 - probs) * (1 - probs).log()).mean()


def policy_loss(logp: torch.Tensor, probs: torch.Tensor, reward: np.ndarray, state: dict, pcfg,
                base_reward: np.ndarray | None = None) -> torch.Tensor:
    """REINFORCE minus an entropy bonus on the tool decisions (the bonus keeps the tool
    probabilities away from 0 / 1). Baseline: the EMA of the rewards (``pcfg.baseline`` "ema",
    official), or ``base_reward``, the undecoded answer's reward on each query ("base_answer").
    The EMA leaves each query's difficulty in the advantage: a +-1 that the tools did not cause
    and that, summed over a batch, pushes every tool the same way."""
    per_query = None
    if pcfg.baseline == "base_answer":   # the config allows only "ema" and "base_answer"
        if base_reward is None:
            raise ValueError("policy.baseline 'base_answer' needs the undecoded answers' rewards")
        per_query = base_reward
    loss = reinforce_loss(logp, reward, state, pcfg.baseline_momentum, per_query)
    return loss - pcfg.entropy_coef * bernoulli_entropy(probs)


def reinforce_epoch(backbone, policy: Policy, cache: Cache, opt, pcfg, rng: np.random.Generator,
                    gen: torch.Generator, state: dict, ctx=None, step0: int = 0) -> int:
    """One pass over the training cache; returns the number of optimiser steps taken."""
    order = rng.permutation(len(cache.text))
    steps = 0
    policy.train()
    for s in range(0, len(order), pcfg.grad_accum):
        rows = order[s:s + pcfg.grad_accum]
        h, pad = cache.hidden[rows], cache.pad[rows]
        probs = torch.sigmoid(policy.router(h, pad)).clamp(1e-6, 1 - 1e-6)
        actions = torch.bernoulli(probs.detach(), generator=gen)
        logp_router = bernoulli_logp(probs, actions)
        mu = policy.gater(h, pad)
        raw = mu.detach() + pcfg.train_std * torch.randn(mu.shape, generator=gen)
        beta = raw.clamp(0, 1)
        logp_gater = torch.distributions.Normal(mu, pcfg.train_std).log_prob(raw)  # unclamped sample
        with torch.no_grad():
            q_n = negative_logits(backbone, cache, rows, actions.numpy().astype(bool), pcfg, gen)
            q_p = positive_logits(backbone, cache, rows, beta)
            q = calibrate(cache.q_o[rows], q_p, q_n, pcfg.a1, pcfg.a2)
            reward = np.where(predict(q.numpy(), cache.tasks[rows]) == cache.answers[rows], 1.0, -1.0)
            base = np.where(predict(cache.q_o[rows].numpy(), cache.tasks[rows]) == cache.answers[rows], 1.0, -1.0)
        loss = policy_loss(logp_router + logp_gater, probs, reward, state, pcfg, base)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), pcfg.grad_clip)
        opt.step()
        steps += 1
        if ctx is not None:
            ctx.log_metrics({"policy/reward": float(reward.mean()), "policy/n_tools": float(actions.sum(1).mean()),
                             "policy/entropy": float(bernoulli_entropy(probs.detach())),
                             "policy/beta": float(mu.detach().mean()), "policy/baseline": state["baseline"],
                             "policy/changed": float((reward != base).mean())},
                            step=step0 + steps)
    policy.eval()
    return steps


def train_policy_stage(cfg, ctx) -> None:
    from components.common.io import load_torch, save_torch, write_table
    from components.common.seeds import seed_everything
    from components.tricd.backbones import open_backbone
    from components.tricd.decode import load_split

    seed = ctx.item["seed"]
    rng = seed_everything(seed)
    gen = torch.Generator().manual_seed(seed)
    p = cfg.policy
    bench_dir, sal_dir = ctx.inputs["build_benchmark"], ctx.inputs["precompute_saliency"]
    backbone = open_backbone(cfg, ctx.inputs["train_backbone"])
    train = load_split(bench_dir, "train", limit=p.train_limit, backbone=backbone)
    val = load_split(bench_dir, "val", limit=p.val_limit, backbone=backbone)
    train_cache = build_cache(backbone, train, load_torch(f"{sal_dir}/train_saliency.pt"))
    val_cache = build_cache(backbone, val, load_torch(f"{sal_dir}/val_saliency.pt"))
    policy = Policy(backbone, p.d_router, p.n_queries, p.gater_hidden, p.tool_ids, p.tool_id_std)
    opt = torch.optim.AdamW(policy.parameters(), lr=p.lr, weight_decay=p.weight_decay)
    state, steps, curve = {"baseline": 0.0}, 0, []
    best, best_state, bad = -1.0, None, 0
    for epoch in range(1, p.max_epochs + 1):
        steps += reinforce_epoch(backbone, policy, train_cache, opt, p, rng, gen, state, ctx, steps)
        val_macro, masks = evaluate_policy(backbone, policy, val_cache, p, seed)
        freq = masks.mean(0)
        curve.append({"epoch": epoch, "val_macro": val_macro, "n_tools": float(masks.sum(1).mean()),
                      **collapse_stats(masks),
                      **{f"freq_{t}": float(f) for t, f in zip(TOOL_NAMES, freq)}})
        ctx.log_metric("policy/val_macro", val_macro, step=epoch)
        ctx.progress(epoch, p.max_epochs, f"epoch {epoch} val macro {val_macro:.3f}")
        if val_macro > best:
            best, bad = val_macro, 0
            best_state = {k: v.clone() for k, v in policy.state_dict().items()}
        else:
            bad += 1
        if epoch >= p.min_epochs and bad >= p.patience:
            break
    policy.load_state_dict(best_state)
    save_torch(ctx.out_dir / "policy.pt", best_state)
    write_table(ctx.out_dir / "train_curve.parquet", {k: [c[k] for c in curve] for k in curve[0]})
    best_epoch = max(curve, key=lambda c: c["val_macro"])   # the kept policy's tool choices on val
    ctx.write_metrics({"best_val_macro": best, "epochs": len(curve), "updates": steps,
                       "val_base_macro": _base_macro(val_cache),
                       **{f"val_{k}": v for k, v in best_epoch.items()
                          if k.startswith("freq_") or k.endswith("_share") or k == "n_tool_sets"}})


def _base_macro(cache: Cache) -> float:
    import pandas as pd

    from components.tricd.decode import score

    qa = pd.DataFrame({"task": cache.tasks, "answer": cache.answers, "compositional":
                       [t.startswith("c_") for t in cache.tasks], "types": [[]] * len(cache.tasks)})
    return score(qa, predict(cache.q_o.numpy(), cache.tasks))["macro"]
