"""Shared fixtures for fif unit tests: a tiny SynthWiki corpus with a hashed bag-of-words
encoder standing in for MiniLM (fast, deterministic, similarity still meaningful)."""
from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from components.common.context import LocalContext
from components.common.io import save_torch
from components.fif.config import FifConfig


def bow_encode(texts: list[str], dim: int = 384) -> np.ndarray:
    out = np.zeros((len(texts), dim), np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"[a-z0-9]+", t.lower()):
            out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % dim] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


class BowEncoder:
    def __init__(self, *args, **kwargs):
        self.cache = {}

    def encode(self, texts):
        return bow_encode(list(texts))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Corpus, graph and (bag-of-words) embeddings for seed 0 of the smoke profile."""
    import torch

    from components.common.io import read_table
    from components.fif.corpus import build_corpus_stage
    from components.fif.graph import build_graph_stage

    root = tmp_path_factory.mktemp("fif")
    cfg = FifConfig.for_profile("smoke")
    corpus = LocalContext(out_dir=root / "corpus", item={"seed": 0})
    build_corpus_stage(cfg, corpus)
    graph = LocalContext(out_dir=root / "graph", inputs={"build_corpus": {"0": root / "corpus"}}, item={"seed": 0})
    build_graph_stage(cfg, graph)
    nodes = read_table(root / "graph" / "nodes.parquet").to_pydict()
    (root / "embed").mkdir()
    save_torch(root / "embed" / "emb.pt", torch.from_numpy(bow_encode(nodes["text"])))
    return {"cfg": cfg, "corpus": root / "corpus", "graph": root / "graph", "embed": root / "embed", "root": root}


from tests.paper.fixtures import *  # noqa: E402,F401,F403  (tiny_checkpoints: the tokenizer beside tiny CLIP)


@pytest.fixture(scope="session")
def benchmark(tmp_path_factory):
    """A parsed-benchmark folder in the paper profile's layout (tests/fif/paper_files.py)."""
    from tests.fif.paper_files import write_benchmark

    return write_benchmark(tmp_path_factory.mktemp("fif-benchmark"), n_queries=12)


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory, tiny_checkpoints):
    from tests.fif.paper_files import tiny_clip

    return tiny_clip(tmp_path_factory.mktemp("fif-clip") / "clip", tiny_checkpoints.tokenizer())


@pytest.fixture
def reader_server():
    from tests.fif.paper_files import fake_reader_server

    server = fake_reader_server()
    yield server
    server.close()


@pytest.fixture(scope="session")
def tiny_mmembed(tmp_path_factory, tiny_checkpoints):
    from tests.fif.paper_files import tiny_mmembed

    return tiny_mmembed(tmp_path_factory.mktemp("fif-mmembed") / "mmembed", tiny_checkpoints.tokenizer())
