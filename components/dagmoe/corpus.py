"""Stage build_corpus: offline text, a locally trained tokenizer, and token streams.

In-domain text is the docstrings of this interpreter's standard library, read with ``ast`` (no
module is imported, so nothing runs and nothing prints). Whole top-level modules are held out for
in-domain validation, so validation text never shares a module with training text. Out-of-domain
text is the language-reference prose of ``pydoc_data.topics`` plus the Zen of Python.
"""
from __future__ import annotations

import ast
import codecs
import hashlib
import importlib.util
import json
import sys
import sysconfig
from pathlib import Path

import numpy as np
import torch

from components.common.io import read_bytes, save_torch, write_bytes_atomic, write_json_atomic
from components.common.seeds import seed_everything

DOC_SEPARATOR = "<|doc|>"
# Parts of the stdlib tree that are tests, vendored code or demos rather than documentation.
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__",
             "_bundled", "turtledemo", "lib2to3", "idlelib"}


# ---------------------------------------------------------------------------- raw text
def stdlib_docstrings(min_chars: int) -> dict[str, list[str]]:
    """``{top_level_module: [docstring, ...]}`` for the stdlib, deduplicated across modules."""
    root = Path(sysconfig.get_paths()["stdlib"])
    by_module: dict[str, list[str]] = {}
    seen: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS or part.startswith("config-") for part in rel.parts[:-1]):
            continue
        module = rel.parts[0].removesuffix(".py")
        for doc in _docstrings_of(path):
            if len(doc) >= min_chars and doc not in seen:
                seen.add(doc)
                by_module.setdefault(module, []).append(doc)
    return by_module


def _docstrings_of(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    docs = (ast.get_docstring(n, clean=True) for n in nodes)
    return [d.strip() for d in docs if d and d.strip()]


def language_reference_texts() -> list[str]:
    """The language-reference topics shipped with pydoc, plus the decoded Zen of Python."""
    from pydoc_data.topics import topics

    texts = [topics[key].strip() for key in sorted(topics)]
    spec = importlib.util.find_spec("this")  # read, not imported: importing prints the Zen
    source = ast.parse(Path(spec.origin).read_text())
    encoded = next(n.value.value for n in source.body
                   if isinstance(n, ast.Assign) and n.targets[0].id == "s")
    texts.append(codecs.decode(encoded, "rot13"))
    return texts


def held_out(module: str, fraction: float, salt: str) -> bool:
    """Stable (interpreter-independent) module split by hash."""
    digest = hashlib.sha256(f"{salt}:{module}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_stdlib(by_module: dict[str, list[str]], fraction: float, salt: str):
    train, val = [], []
    train_mods, val_mods = [], []
    for module in sorted(by_module):
        if held_out(module, fraction, salt):
            val.extend(by_module[module]); val_mods.append(module)
        else:
            train.extend(by_module[module]); train_mods.append(module)
    return train, val, train_mods, val_mods


def read_text_files(paths: list[str]) -> list[str]:
    return [read_bytes(p).decode("utf-8", errors="replace") for p in paths]


def cap_documents(docs: list[str], max_chars: int, seed: int = 0) -> list[str]:
    """Shuffle (fixed seed) and keep documents until ``max_chars``: a cap that does not favour
    alphabetically early modules."""
    order = np.random.default_rng(seed).permutation(len(docs))
    kept, total = [], 0
    for i in order:
        if total >= max_chars:
            break
        kept.append(docs[i]); total += len(docs[i])
    return kept


# ---------------------------------------------------------------------------- tokenizers
class ByteTokenizer:
    """UTF-8 bytes plus one separator id (256)."""

    vocab_size = 257

    def encode_documents(self, docs: list[str]) -> np.ndarray:
        pieces = []
        for doc in docs:
            pieces.append(np.frombuffer(doc.encode("utf-8"), dtype=np.uint8).astype(np.int32))
            pieces.append(np.asarray([256], dtype=np.int32))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)

    def to_json(self) -> str:
        return json.dumps({"type": "bytes", "separator": 256})


class BpeTokenizer:
    """Byte-level BPE trained with the ``tokenizers`` library on the training split only."""

    def __init__(self, docs: list[str], vocab_size: int):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        self.tok = Tokenizer(models.BPE())
        self.tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self.tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[DOC_SEPARATOR],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        self.tok.train_from_iterator(docs, trainer=trainer)
        self.vocab_size = self.tok.get_vocab_size()
        self.separator = self.tok.token_to_id(DOC_SEPARATOR)

    def encode_documents(self, docs: list[str]) -> np.ndarray:
        pieces = []
        for enc in self.tok.encode_batch(docs):
            pieces.append(np.asarray(enc.ids, dtype=np.int32))
            pieces.append(np.asarray([self.separator], dtype=np.int32))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)

    def to_json(self) -> str:
        return self.tok.to_str()


def make_tokenizer(kind: str, train_docs: list[str], vocab_size: int):
    return BpeTokenizer(train_docs, vocab_size) if kind == "bpe" else ByteTokenizer()


# ---------------------------------------------------------------------------- stage
def collect_texts(corpus) -> tuple[list[str], list[str], list[str], dict]:
    if corpus.source == "files":
        return (read_text_files(corpus.train_files), read_text_files(corpus.val_id_files),
                read_text_files(corpus.val_ood_files), {"source": "files"})
    by_module = stdlib_docstrings(corpus.min_doc_chars)
    train, val_id, train_mods, val_mods = split_stdlib(
        by_module, corpus.val_module_fraction, corpus.split_salt)
    info = {"source": "stdlib", "python": sys.version.split()[0],
            "train_modules": len(train_mods), "val_modules": val_mods}
    return train, val_id, language_reference_texts(), info


def build_corpus_stage(cfg, ctx) -> None:
    corpus = cfg.corpus
    seed_everything(0)
    train, val_id, val_ood, info = collect_texts(corpus)
    train = cap_documents(train, corpus.max_train_chars)
    ctx.progress(1, 3, f"{len(train)} train docs; training the {corpus.tokenizer} tokenizer")
    tokenizer = make_tokenizer(corpus.tokenizer, train, corpus.vocab_size)
    write_bytes_atomic(ctx.out_dir / "tokenizer.json", tokenizer.to_json().encode())
    splits = {"train": train, "val_id": val_id, "val_ood": val_ood}
    stats = {"vocab_size": int(tokenizer.vocab_size), **info}
    for i, (name, docs) in enumerate(splits.items()):
        ids = tokenizer.encode_documents(docs)
        save_torch(ctx.out_dir / f"{name}.pt", torch.from_numpy(ids))
        stats[f"{name}_docs"], stats[f"{name}_chars"] = len(docs), sum(map(len, docs))
        stats[f"{name}_tokens"] = int(len(ids))
        ctx.progress(2 + i, 4, f"tokenised {name}")
    write_json_atomic(ctx.out_dir / "meta.json", stats)
    ctx.write_metrics({k: v for k, v in stats.items() if isinstance(v, (int, float))})
