"""Tiny datasets written in the papers' published on-disk layouts (generated, never downloaded).

Text comes from a seeded toy grammar, so a tokenizer trained on it and a corpus read from it
agree, and the same seed writes the same bytes.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np

SUBJECTS = ["the cat", "a dog", "the model", "my friend", "the river", "a small bird", "the teacher"]
VERBS = ["sees", "likes", "follows", "reads", "finds", "builds", "answers"]
OBJECTS = ["the ball", "a long book", "the old tree", "a red house", "the question", "the garden"]
ENDINGS = [".", "!", " today.", " again.", " in the morning."]


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}"
            for _ in range(n)]


def documents(n: int, seed: int = 0, sentences_per_doc: int = 6) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(sentences(rng.randint(2, sentences_per_doc), seed=seed * 100_003 + i)) for i in range(n)]


def write_c4(root: Path, n_train: int = 200, n_validation: int = 80, shards: int = 2, seed: int = 0) -> Path:
    """allenai/c4's ``en/`` layout: gzipped JSON lines with ``text``, ``timestamp``, ``url``."""
    folder = Path(root) / "en"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n, offset in (("train", n_train, 0), ("validation", n_validation, 10_000)):
        docs = documents(n, seed=seed + offset)
        for shard in range(shards):
            path = folder / f"c4-{split}.{shard:05d}-of-{shards:05d}.json.gz"
            with gzip.open(path, "wt", encoding="utf-8") as f:
                for i, text in enumerate(docs[shard::shards]):
                    f.write(json.dumps({"text": text, "timestamp": "2019-04-25T12:57:54Z",
                                        "url": f"https://example.org/{split}/{shard}/{i}"}) + "\n")
    return Path(root)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_image_folder(root: Path, classes: list[str], per_class: int = 3, domains: list[str] | None = None,
                       size: int = 16, seed: int = 0) -> Path:
    """``root/<class>/<i>.png`` or, with ``domains``, ``root/<domain>/<class>/<i>.png`` (DomainBed)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for domain in domains or [""]:
        for label, name in enumerate(classes):
            folder = Path(root) / domain / name if domain else Path(root) / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                pixels[..., label % 3] = 255          # a class-dependent colour channel
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return Path(root)


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path
