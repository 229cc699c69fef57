"""A small nanoGPT-style decoder-only transformer with a pluggable feed-forward slot.

The block is pre-norm: ``x + attn(ln(x))`` then ``x + ffn(ln(x))``. The feed-forward module is
built by a factory ``make_ffn(layer_index) -> nn.Module`` mapping ``(B, T, d) -> (B, T, d)``, so a
method can drop in a Mixture-of-Experts layer (or anything else) without touching attention,
embeddings or the LM head. Extra losses a slot wants to add (e.g. MoE load balancing) are the
method's business: keep them on the module and collect them after the forward pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class DecoderShape:
    vocab_size: int
    d_model: int = 96
    n_layers: int = 3
    n_heads: int = 4
    context: int = 64
    dropout: float = 0.0
    tie_embeddings: bool = True


class MLP(nn.Module):
    """The default feed-forward slot: Linear -> GELU -> Linear (bias-free)."""

    def __init__(self, d_model: int, d_hidden: int):
        super().__init__()
        self.up = nn.Linear(d_model, d_hidden, bias=False)
        self.down = nn.Linear(d_hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.n_heads, self.dropout = n_heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        # (B, T, d) -> (B, heads, T, d_head)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm block. With ``ffn_residual=False`` the feed-forward slot owns the residual path
    of its half: it is called as ``ffn(ln(x), residual=x)`` and returns the new stream itself
    (e.g. DAG-MoE, which injects the residual into its expert nodes)."""

    def __init__(self, d_model: int, n_heads: int, ffn: nn.Module, dropout: float = 0.0,
                 ffn_residual: bool = True):
        super().__init__()
        self.ln_attn = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln_ffn = nn.LayerNorm(d_model)
        self.ffn = ffn
        self.ffn_residual = ffn_residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x))
        if self.ffn_residual:
            return x + self.ffn(self.ln_ffn(x))
        return self.ffn(self.ln_ffn(x), residual=x)


class Decoder(nn.Module):
    """Token + learned position embeddings, ``n_layers`` blocks, final LayerNorm, LM head."""

    def __init__(self, shape: DecoderShape, make_ffn: Callable[[int], nn.Module],
                 ffn_residual: bool = True):
        super().__init__()
        self.shape = shape
        self.tok_emb = nn.Embedding(shape.vocab_size, shape.d_model)
        self.pos_emb = nn.Embedding(shape.context, shape.d_model)
        self.blocks = nn.ModuleList(
            Block(shape.d_model, shape.n_heads, make_ffn(i), shape.dropout, ffn_residual)
            for i in range(shape.n_layers))
        self.ln_out = nn.LayerNorm(shape.d_model)
        self.head = nn.Linear(shape.d_model, shape.vocab_size, bias=False)
        self.apply(_init_weights)
        if shape.tie_embeddings:  # fewer parameters and a better small-model LM (nanoGPT)
            self.head.weight = self.tok_emb.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """``idx`` (B, T) token ids -> logits (B, T, vocab)."""
        t = idx.shape[1]
        if t > self.shape.context:
            raise ValueError(f"sequence length {t} exceeds the context {self.shape.context}")
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_out(x))


def _init_weights(module: nn.Module) -> None:
    # GPT-2 style: N(0, 0.02) for linears and embeddings. Modules that need a special init
    # (e.g. a zero-initialised projection) re-apply it in their own reset_parameters().
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    if hasattr(module, "reset_special_parameters"):
        module.reset_special_parameters()


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) over all positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def count_parameters(module: nn.Module) -> int:
    """Unique trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in module.parameters() if p.requires_grad}.values())


class CrossBlock(nn.Module):
    """Pre-norm cross-attention block: queries ``q`` read from ``kv``, then an optional
    feed-forward half (hidden ``ff_mult * d``). ``pad_mask`` (B, Lkv), True = padding.
    With ``feed_forward=False`` it is attention only (e.g. a light info-share layer)."""

    def __init__(self, d: int, n_heads: int = 4, ff_mult: int = 2, feed_forward: bool = True):
        super().__init__()
        self.ln_q, self.ln_kv = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ln_ff = nn.LayerNorm(d) if feed_forward else None
        self.attn = nn.MultiheadAttention(d, n_heads, batch_first=True)
        self.ff = (nn.Sequential(nn.Linear(d, ff_mult * d), nn.GELU(), nn.Linear(ff_mult * d, d))
                   if feed_forward else None)

    def forward(self, q: torch.Tensor, kv: torch.Tensor,
                pad_mask: torch.Tensor | None = None) -> torch.Tensor:
        kv = self.ln_kv(kv)
        q = q + self.attn(self.ln_q(q), kv, kv, key_padding_mask=pad_mask, need_weights=False)[0]
        return q + self.ff(self.ln_ff(q)) if self.ff is not None else q
