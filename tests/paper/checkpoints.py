"""The tiny-checkpoint factory: every model family the paper profiles use, built from the
library's config class with random weights, saved with ``save_pretrained`` in a session temp
folder, and cached so each family is built once per test session.

    folder = tiny.checkpoint("qwen3")      # config.json + model.safetensors (+ tokenizer for LMs)
    model = load_model(folder, tiny.kind("qwen3"), device="cpu")
"""
from __future__ import annotations

import threading
from pathlib import Path

from components.common.tiny_models import FAMILIES, build_tiny, load_kind
from tests.paper.layouts import documents, sentences

# decoder LMs get a tokenizer saved beside them (vocab sized to the model's embedding)
WITH_TOKENIZER = {"qwen3", "gemma2", "llama", "llava", "qwen2_vl"}
TOKENIZER_VOCAB = 512


def corpus(n_docs: int = 400, seed: int = 0) -> list[str]:
    return documents(n_docs, seed) + sentences(200, seed + 1)


class TinyCheckpoints:
    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock = threading.RLock()     # checkpoint() may call tokenizer()
        self._built: dict[str, Path] = {}

    def tokenizer(self, kind: str = "bpe") -> Path:
        """A tokenizer trained on the toy corpus, saved alone (e.g. ioadam's tokenizer_path)."""
        key = f"tokenizer-{kind}"
        with self._lock:
            if key not in self._built:
                from components.common.tiny_tokenizer import train_tokenizer

                tok = train_tokenizer(corpus(), kind=kind, vocab_size=TOKENIZER_VOCAB)
                folder = self.root / key
                tok.save_pretrained(str(folder))
                self._built[key] = folder
            return self._built[key]

    def checkpoint(self, family: str) -> Path:
        with self._lock:
            if family not in self._built:
                self._built[family] = self._build(family)
            return self._built[family]

    def _build(self, family: str) -> Path:
        from components.common.hf_models import save_model

        model = build_tiny(family)
        tokenizer = None
        if family in WITH_TOKENIZER:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(self.tokenizer()))
        return save_model(model, self.root / family, tokenizer)

    @staticmethod
    def kind(family: str) -> str:
        return load_kind(family)

    @staticmethod
    def families() -> list[str]:
        return list(FAMILIES)
