"""Text embeddings from a local transformers folder (never a hub), for retrieval.

``HFTextEncoder(folder, pooling=...)`` loads the bare model with ``hf_models.load_model(...,
"encoder")`` and its tokenizer with ``hf_models.load_tokenizer`` and returns unit-norm vectors,
memoised by text like ``minilm.SentenceEncoder`` (``encode(texts)``, ``encoder(texts)``).

Poolings:
- ``last``: the hidden state of the last real token (decoder embedders: Qwen3-Embedding, e5-mistral,
  gte-Qwen). Qwen3-Embedding's own tokenizer appends its end token (``<|endoftext|>``) to every
  text, and that token's state is the embedding; the position comes from the attention mask, so
  left and right padding give the same vector.
- ``mean``: the mask-weighted mean over tokens (sentence-transformers' default, e.g. MiniLM).
- ``cls``: the first token's state (BERT-style encoders).

Queries may carry a task instruction in Qwen3-Embedding's format, ``"Instruct: {task}\\nQuery:{text}"``
(``encode(texts, query=True)``); documents are encoded as they are unless ``instruct_documents``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

POOLINGS = ("last", "mean", "cls")
QWEN3_EMBEDDING_DEFAULT_TASK = "Given a web search query, retrieve relevant passages that answer the query"


def instructed(task: str, text: str) -> str:
    """Qwen3-Embedding's query format (its model card's ``get_detailed_instruct``)."""
    return f"Instruct: {task}\nQuery:{text}"


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """hidden (B, T, D), mask (B, T) -> (B, D), before normalisation."""
    if pooling == "last":
        positions = torch.arange(mask.shape[1], device=mask.device)[None, :]
        last = (positions * mask.long()).argmax(1)           # highest position whose mask is 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        m = mask[..., None].to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)
    raise ValueError(f"unknown pooling {pooling!r}; choose from {POOLINGS}")


class HFTextEncoder:
    """Unit-norm text embeddings from a local ``save_pretrained`` folder (see the module
    docstring). ``encode(texts, query=False)`` -> float32 (N, hidden_size), in ``texts`` order."""

    def __init__(self, folder: str | Path, pooling: str = "last", instruction: str = "",
                 instruct_documents: bool = False, max_tokens: int = 512, batch: int = 16, device: str = "auto"):
        from components.common.hf_models import load_model, load_tokenizer

        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose from {POOLINGS}")
        self.folder, self.pooling, self.instruction = Path(folder), pooling, instruction
        self.instruct_documents, self.max_tokens, self.batch = instruct_documents, max_tokens, batch
        self.model = load_model(folder, "encoder", device=device)
        self.tok = load_tokenizer(folder)
        self.device = next(self.model.parameters()).device
        self.cache: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def _text(self, text: str, query: bool) -> str:
        return instructed(self.instruction, text) if self.instruction and (query or self.instruct_documents) else text

    @torch.no_grad()
    def _encode(self, texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), self.batch):
            enc = self.tok(texts[i:i + self.batch], padding=True, truncation=True, max_length=self.max_tokens,
                           return_tensors="pt").to(self.device)
            h = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
            v = pool(h.float(), enc["attention_mask"], self.pooling)
            out.append(torch.nn.functional.normalize(v, dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    def encode(self, texts: list[str], query: bool = False) -> np.ndarray:
        full = [self._text(t, query) for t in texts]
        todo = sorted({t for t in full if t not in self.cache})   # sorted: batches do not depend on call order
        for t, v in zip(todo, self._encode(todo) if todo else []):
            self.cache[t] = v
        return np.stack([self.cache[t] for t in full]).astype(np.float32) if full else np.zeros((0, self.dim),
                                                                                               np.float32)

    __call__ = encode


# Qwen3-Reranker's prompt (its model card): a yes/no judgement at the last position
RERANK_SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
                 'Note that the answer can only be "yes" or "no".')
RERANK_PREFIX = f"<|im_start|>system\n{RERANK_SYSTEM}<|im_end|>\n<|im_start|>user\n"
RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


class HFYesNoReranker:
    """A causal LM as a pointwise reranker (Qwen3-Reranker): the score of (query, document) is
    P("yes") / (P("yes") + P("no")) of the next token after Qwen3-Reranker's prompt. Loaded with
    ``hf_models.load_model(..., "causal_lm")``; ``score(query, documents)`` -> float array."""

    def __init__(self, folder: str | Path, instruction: str = QWEN3_EMBEDDING_DEFAULT_TASK, max_tokens: int = 1024,
                 batch: int = 8, device: str = "auto", yes: str = "yes", no: str = "no"):
        from components.common.hf_models import load_model, load_tokenizer

        self.instruction, self.max_tokens, self.batch = instruction, max_tokens, batch
        self.model = load_model(folder, "causal_lm", device=device)
        self.tok = load_tokenizer(folder, padding_side="left")
        self.device = next(self.model.parameters()).device
        vocab = self.tok.get_vocab()
        missing = [w for w in (yes, no) if w not in vocab]
        if missing:
            raise ValueError(f"{folder}: the reranker's tokenizer has no token for {missing} (a yes/no reranker "
                             "such as Qwen3-Reranker is expected)")
        self.yes_id, self.no_id = vocab[yes], vocab[no]

    def prompt(self, query: str, document: str) -> str:
        return f"{RERANK_PREFIX}<Instruct>: {self.instruction}\n<Query>: {query}\n<Document>: {document}{RERANK_SUFFIX}"

    @torch.no_grad()
    def score(self, query: str, documents: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(documents), self.batch):
            texts = [self.prompt(query, d) for d in documents[i:i + self.batch]]
            enc = self.tok(texts, padding=True, truncation=True, max_length=self.max_tokens,
                           return_tensors="pt").to(self.device)
            logits = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
            last = pool(logits, enc["attention_mask"], "last")[:, [self.no_id, self.yes_id]].float()
            out.append(torch.softmax(last, -1)[:, 1].cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0, np.float32)
