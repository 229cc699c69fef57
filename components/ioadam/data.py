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
    if c.corpus_path:
        parts = split_text_file(Path(c.corpus_path).expanduser(), c.val_frac, c.test_frac)
    else:
        parts = tasks.docstring_corpus(c.max_bytes, c.val_frac, c.test_frac)
    corpus = {k: torch.frombuffer(bytearray(v), dtype=torch.uint8).clone() for k, v in parts.items()}
    save_torch(ctx.out_dir / "corpus.pt", corpus)
    metrics = {f"bytes_{k}": len(v) for k, v in parts.items()}
    metrics["sha1_train"] = hashlib.sha1(parts["train"]).hexdigest()[:12]  # which stdlib it came from
    ctx.write_metrics(metrics)


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
