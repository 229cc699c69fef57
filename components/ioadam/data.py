"""prepare_digits and prepare_corpus stages."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from components.common.io import load_torch, save_torch
from components.ioadam import tasks


def prepare_digits_stage(cfg, ctx) -> None:
    d = cfg.digits
    splits = tasks.digits_splits(d.val_frac, d.test_frac, d.split_seed)
    save_torch(ctx.out_dir / "digits.pt", splits)
    ctx.write_metrics({f"n_{s}": int(len(splits[f"y_{s}"])) for s in ("train", "val", "test")})


def prepare_corpus_stage(cfg, ctx) -> None:
    c = cfg.charlm
    if c.source == "c4":
        corpus, metrics = c4_corpus(c)
    else:
        if c.source == "text":
            parts = split_text_file(Path(c.corpus_path).expanduser(), c.val_frac, c.test_frac)
        else:
            parts = tasks.docstring_corpus(c.max_bytes, c.val_frac, c.test_frac)
        corpus = {k: torch.frombuffer(bytearray(v), dtype=torch.uint8).clone() for k, v in parts.items()}
        metrics = {f"bytes_{k}": len(v) for k, v in parts.items()}
    metrics["sha1_train"] = hashlib.sha1(corpus["train"].numpy().tobytes()).hexdigest()[:12]  # which data it came from
    save_torch(ctx.out_dir / "corpus.pt", corpus)
    ctx.write_metrics(metrics)


def c4_corpus(c) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """Token ids of C4 shards (paper profile): train from the c4-train shards, val and test from
    the c4-validation shards (alternate documents, so neither is a prefix of the other). Each
    document is tokenised and ended with EOS, as in GaLore's pre-training data."""
    from components.common.hf_models import load_tokenizer
    from components.common.readers import expand
    from components.ioadam.config import C4_TRAIN, C4_VALIDATION

    tok = load_tokenizer(c.tokenizer_path)
    root = str(Path(c.corpus_path).expanduser())
    train, n_train = _tokenise_docs(tok, expand(f"{root}/{C4_TRAIN}"), c.max_train_tokens)
    held_out, n_held = _tokenise_docs(tok, expand(f"{root}/{C4_VALIDATION}"), 2 * c.max_eval_tokens, split=True)
    corpus = {"train": train, "val": held_out[0], "test": held_out[1]}
    metrics = {f"tokens_{k}": int(len(v)) for k, v in corpus.items()}
    metrics.update(docs_train=n_train, docs_held_out=n_held, vocab_size=len(tok))
    return corpus, metrics


def _tokenise_docs(tok, files: list[str], budget: int, split: bool = False, chunk: int = 1024):
    """Concatenated ids (int32) of the documents' ``text`` until ``budget`` tokens; with ``split``,
    two streams of alternating documents (val, test) sharing the budget. Ids are kept as int32
    numpy chunks: a Python list of a billion ints would need ~40 GB."""
    from components.common.readers import iter_jsonl

    streams: list[list[np.ndarray]] = [[], []] if split else [[]]
    docs, total, batch = 0, 0, []

    def flush() -> int:
        added = 0
        for i, ids in enumerate(tok(batch, add_special_tokens=False)["input_ids"]):
            streams[(docs - len(batch) + i) % len(streams)].append(np.asarray(ids + [tok.eos_token_id], np.int32))
            added += len(ids) + 1
        batch.clear()
        return added

    for record in iter_jsonl(files, schema={"text": str}):
        batch.append(record["text"])
        docs += 1
        if len(batch) == chunk:
            total += flush()
            if total >= budget:
                break
    if batch:
        flush()
    cap = budget // len(streams)
    tensors = [torch.from_numpy(np.concatenate(s)[:cap] if s else np.zeros(0, np.int32)) for s in streams]
    return (tensors if split else tensors[0]), docs


def split_text_file(path: Path, val_frac: float, test_frac: float) -> dict[str, bytes]:
    """A user corpus (paper profile): contiguous head/val/test blocks of the file's bytes."""
    raw = path.read_bytes()
    n_val, n_test = int(len(raw) * val_frac), int(len(raw) * test_frac)
    n_train = len(raw) - n_val - n_test
    return {"train": raw[:n_train], "val": raw[n_train:n_train + n_val], "test": raw[n_train + n_val:]}


def load_digits_splits(folder: Path) -> dict[str, np.ndarray]:
    return load_torch(Path(folder) / "digits.pt")


def load_corpus(folder: Path) -> dict[str, torch.Tensor]:
    return load_torch(Path(folder) / "corpus.pt")
