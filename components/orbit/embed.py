"""Sentence embeddings with all-MiniLM-L6-v2: the shared memoised encoder of
components/common/minilm.py (mean pool + L2 norm), under orbit's historical name."""
from __future__ import annotations

from components.common.minilm import SentenceEncoder

Embedder = SentenceEncoder
