"""Stage build_corpus: offline text, a locally trained tokenizer, and token streams.

In-domain text is the docstrings of this interpreter's standard library, read with ``ast`` (no
module is imported, so nothing runs and nothing prints). Whole top-level modules are held out for
in-domain validation, so validation text never shares a module with training text. Out-of-domain
text is the language-reference prose of ``pydoc_data.topics`` plus the Zen of Python.

The paper profile (``corpus.source="shards"``) streams the paper's corpora from local roots in
their published layouts instead -- The Pile (train shards for training, ``val.jsonl.zst`` as the
in-domain eval set) and Wikipedia, FineWeb-Edu and C4 (out-of-domain eval sets) -- tokenised
by a tokenizer from a local folder. Documents are read a batch at a time and the ids appended
to disk, so neither the text nor the token stream is ever held in memory whole.

Every source writes the same layout: ``train.bin`` and one ``<eval set>.bin`` per eval set
(int32 ids, read back as memory maps), ``tokenizer.json`` where the tokenizer was trained here,
and ``meta.json`` (vocabulary size, the eval sets and whether each is in- or out-of-domain).
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
from typing import Iterable, Iterator

import numpy as np

from components.common.io import read_bytes, write_bytes_atomic, write_json_atomic
from components.common.seeds import seed_everything

DOC_SEPARATOR = "<|doc|>"
TOKEN_DTYPE = np.int32
# eval set -> "id" (in-domain) or "ood"; the small corpora have one of each
SMALL_EVAL_SETS = {"val_id": "id", "val_ood": "ood"}
# the paper's eval sets: (paper key of the root, files under it, domain, read from the last file)
PAPER_EVAL_SETS = {
    "pile": ("pile_root", "val.jsonl.zst", "id", False),
    "wikipedia": ("wikipedia_root", "**/*.parquet", "ood", True),
    "fineweb_edu": ("fineweb_edu_root", "**/*.parquet", "ood", True),
    "c4": ("c4_root", "**/c4-validation.*.json*", "ood", False),
}
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


# ---------------------------------------------------------------------------- token files
class TokenWriter:
    """Appends int32 id chunks to ``path`` (a flat binary file read back by ``load_tokens``)."""

    def __init__(self, path: Path):
        self.path, self.count = Path(path), 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")

    def write(self, ids: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(ids, dtype=TOKEN_DTYPE).tobytes())
        self.count += len(ids)

    def close(self) -> None:
        self._file.close()


def write_tokens(path: Path, ids: np.ndarray) -> int:
    writer = TokenWriter(path)
    writer.write(ids)
    writer.close()
    return writer.count


def load_tokens(corpus_dir: Path, name: str) -> np.ndarray:
    """The ids of one split as a read-only memory map (pages are read when windows touch them)."""
    path = Path(corpus_dir) / f"{name}.bin"
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=TOKEN_DTYPE)
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r")


# ---------------------------------------------------------------------------- paper shards
def shard_files(root: str, pattern: str, reverse: bool = False) -> list[str]:
    from components.common.readers import expand

    files = expand(f"{str(root).rstrip('/')}/{pattern}")
    return files[::-1] if reverse else files


def jsonl_texts(path: str) -> Iterator[str]:
    """The ``text`` field of each line of a JSON-lines file, read line by line; ``.zst`` is
    decompressed with pyarrow's zstd stream (The Pile), ``.gz``/others by fsspec (C4)."""
    import io

    import fsspec
    import pyarrow as pa

    from components.common.readers import DatasetError

    with fsspec.open(path, "rb", compression=None if path.endswith(".zst") else "infer") as raw:
        stream = raw
        if path.endswith(".zst"):
            stream = io.BufferedReader(pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd"))
        for lineno, line in enumerate(io.TextIOWrapper(stream, encoding="utf-8"), 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line).get("text")
            except (json.JSONDecodeError, AttributeError):
                raise DatasetError(f"{path}:{lineno}: not a JSON object per line") from None
            if not isinstance(text, str):
                raise DatasetError(f"{path}:{lineno}: missing string field 'text'")
            yield text


def parquet_texts(path: str, batch_rows: int = 1_024) -> Iterator[str]:
    """The ``text`` column of a parquet file, one row group batch at a time (Wikipedia,
    FineWeb-Edu); other columns are never read."""
    import fsspec
    import pyarrow.parquet as pq

    from components.common.readers import DatasetError

    with fsspec.open(path, "rb") as raw:
        try:
            parquet = pq.ParquetFile(raw)
        except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise DatasetError(f"{path}: not a parquet file ({err})") from None
        if "text" not in parquet.schema_arrow.names:
            raise DatasetError(f"{path}: missing column 'text' (has {', '.join(parquet.schema_arrow.names)})")
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=["text"]):
            yield from (t for t in batch.column(0).to_pylist() if t)


def shard_texts(files: Iterable[str]) -> Iterator[str]:
    for path in files:
        yield from parquet_texts(path) if path.endswith(".parquet") else jsonl_texts(path)


def stream_tokens(tok, texts: Iterable[str], budget: int, writer: TokenWriter,
                  read_batch: int) -> int:
    """Tokenise documents a batch at a time (each ended by the tokenizer's EOS) and append the
    ids to ``writer`` until ``budget`` tokens; returns the number of documents read."""
    if tok.eos_token_id is None:
        raise ValueError("paper.tokenizer_path: the tokenizer has no eos_token (needed as the "
                         "document separator)")
    docs, batch = 0, []
    for text in texts:
        batch.append(text)
        if len(batch) == read_batch:
            docs += len(batch)
            if _append_batch(tok, batch, budget, writer):
                return docs
    if batch:
        docs += len(batch)
        _append_batch(tok, batch, budget, writer)
    return docs


def _append_batch(tok, batch: list[str], budget: int, writer: TokenWriter) -> bool:
    """Appends the batch's ids (cut at the budget); True when the budget is reached."""
    ids = tok(batch, add_special_tokens=False)["input_ids"]
    batch.clear()
    eos = [tok.eos_token_id]
    flat = np.fromiter((i for doc in ids for i in doc + eos), dtype=TOKEN_DTYPE)
    writer.write(flat[:budget - writer.count])
    return writer.count >= budget


def build_shard_corpus(paper, out_dir: Path, progress) -> dict:
    """Train ids from The Pile's train shards, one eval set per corpus (PAPER_EVAL_SETS)."""
    from components.common.hf_models import load_tokenizer
    from components.dagmoe.config import PILE_TRAIN

    tok = load_tokenizer(paper.tokenizer_path)
    jobs = {"train": (shard_files(paper.pile_root, PILE_TRAIN), paper.max_train_tokens)}
    for name, (key, pattern, _, reverse) in PAPER_EVAL_SETS.items():
        jobs[name] = (shard_files(getattr(paper, key), pattern, reverse), paper.max_eval_tokens)
    stats: dict = {"vocab_size": len(tok), "source": "shards",
                   "eval_sets": {name: spec[2] for name, spec in PAPER_EVAL_SETS.items()}}
    for i, (name, (files, budget)) in enumerate(jobs.items()):
        writer = TokenWriter(out_dir / f"{name}.bin")
        stats[f"{name}_docs"] = stream_tokens(tok, shard_texts(files), budget, writer, paper.read_batch)
        writer.close()
        stats[f"{name}_files"], stats[f"{name}_tokens"] = len(files), writer.count
        if writer.count < 2:
            raise ValueError(f"build_corpus: the {name} files yielded {writer.count} tokens")
        progress(1 + i, 1 + len(jobs), f"tokenised {name}: {writer.count} tokens")
    return stats


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


def build_text_corpus(corpus, out_dir: Path, progress) -> dict:
    """The small corpora: texts in memory, a tokenizer trained here on the training split."""
    seed_everything(0)
    train, val_id, val_ood, info = collect_texts(corpus)
    train = cap_documents(train, corpus.max_train_chars)
    progress(1, 3, f"{len(train)} train docs; training the {corpus.tokenizer} tokenizer")
    tokenizer = make_tokenizer(corpus.tokenizer, train, corpus.vocab_size)
    write_bytes_atomic(out_dir / "tokenizer.json", tokenizer.to_json().encode())
    splits = {"train": train, "val_id": val_id, "val_ood": val_ood}
    stats = {"vocab_size": int(tokenizer.vocab_size), **info, "eval_sets": dict(SMALL_EVAL_SETS)}
    for i, (name, docs) in enumerate(splits.items()):
        n_ids = write_tokens(out_dir / f"{name}.bin", tokenizer.encode_documents(docs))
        stats[f"{name}_docs"], stats[f"{name}_chars"] = len(docs), sum(map(len, docs))
        stats[f"{name}_tokens"] = int(n_ids)
        progress(2 + i, 4, f"tokenised {name}")
    return stats


def build_corpus_stage(cfg, ctx) -> None:
    if cfg.corpus.source == "shards":
        stats = build_shard_corpus(cfg.paper, ctx.out_dir, ctx.progress)
    else:
        stats = build_text_corpus(cfg.corpus, ctx.out_dir, ctx.progress)
    write_json_atomic(ctx.out_dir / "meta.json", stats)
    ctx.write_metrics({k: v for k, v in stats.items() if isinstance(v, (int, float))})


def eval_sets(corpus_dir: Path) -> dict[str, str]:
    """``{eval set: "id" | "ood"}`` as build_corpus wrote it (in file order)."""
    from components.common.io import read_json

    return read_json(Path(corpus_dir) / "meta.json").get("eval_sets", dict(SMALL_EVAL_SETS))
