"""The retrieval embedder of generate_rubrics.

Small profile: all-MiniLM-L6-v2, the shared memoised encoder of components/common/minilm.py
(mean pool + L2 norm; ``Embedder`` is its historical name here). Paper profile: a local
transformers folder, Qwen3-Embedding as the paper, through components/common/text_encoder.py
(last-token pooling, L2 norm, Qwen3-Embedding's instruction on queries)."""
from __future__ import annotations

import numpy as np

from components.common.minilm import SentenceEncoder

Embedder = SentenceEncoder


class Retriever:
    """Query and document embeddings from the configured model (config section ``rubrics``)."""

    def __init__(self, r):
        if r.embedder:
            from components.common.text_encoder import HFTextEncoder

            self.name = "hf:" + r.embed_pooling
            self.encoder = HFTextEncoder(r.embedder, r.embed_pooling, r.embed_instruction,
                                         r.embed_instruct_documents, r.embed_max_tokens, device=r.device)
        else:
            self.name, self.encoder = "minilm", Embedder(r.embed_max_tokens)

    def queries(self, texts: list[str]) -> np.ndarray:
        return self.encoder(texts, query=True) if self.name != "minilm" else self.encoder(texts)

    def documents(self, texts: list[str]) -> np.ndarray:
        return self.encoder(texts)


def make_reranker(r):
    """The optional yes/no reranker (Qwen3-Reranker) from ``rubrics.reranker``, or None."""
    if not r.reranker:
        return None
    from components.common.text_encoder import HFYesNoReranker

    return HFYesNoReranker(r.reranker, r.embed_instruction, device=r.device)
