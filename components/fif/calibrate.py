"""Dev-seed calibration of the reader's near-miss threshold and the landmark coverage.

Run by hand before the pre-registration (never on the test seeds):
    python -m components.fif.calibrate --seed 100 --sims 0.65 0.75 --rates 0.3 0.5 --landmarks 20 40
It prints R@10 of fif and fif_no_backtrack and how often near misses / backtracking fired.
"""
from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import torch

from components.common.context import LocalContext
from components.common.io import read_table, save_torch
from components.fif.config import FifConfig
from components.fif.corpus import build_corpus_stage
from components.fif.evaluate import qrels_by_query, score_runs
from components.fif.graph import build_graph_stage
from components.fif.graph_index import GraphIndex
from components.fif.embed import MiniLMEncoder
from components.fif.retrieve import run_all


def dev_point(cfg: FifConfig, seed: int, encoder, root: Path) -> dict:
    """Corpus, graph, embeddings and the dev arms for one setting; metrics per method."""
    item = {"seed": seed}
    c, g, e = root / "corpus", root / "graph", root / "embed"
    build_corpus_stage(cfg, LocalContext(out_dir=c, item=item))
    build_graph_stage(cfg, LocalContext(out_dir=g, inputs={"build_corpus": {str(seed): c}}, item=item))
    e.mkdir(parents=True, exist_ok=True)
    save_torch(e / "emb.pt", torch.from_numpy(encoder.encode(read_table(g / "nodes.parquet").to_pydict()["text"])))
    index = GraphIndex.load(c, g, e)
    queries = read_table(c / "queries.parquet").to_pydict()
    cols = run_all(index, encoder, queries, cfg.retrieve, seed, dev=True)
    qrels_t = read_table(c / "qrels.parquet").to_pydict()
    return score_runs(cols, qrels_by_query(qrels_t))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--sims", type=float, nargs="+", default=[0.6])
    ap.add_argument("--landmarks", type=int, nargs="+", default=[40])
    ap.add_argument("--rates", type=float, nargs="+", default=[0.3], help="corpus.nearmiss_rate values")
    ap.add_argument("--methods", nargs="+", default=["fif", "fif_no_backtrack"])
    a = ap.parse_args()
    torch.set_num_threads(1)
    base = FifConfig()
    encoder = MiniLMEncoder(base.embed.max_tokens, base.embed.batch)
    for n_land, rate, sim in itertools.product(a.landmarks, a.rates, a.sims):
        cfg = base.model_copy(update={
            "corpus": base.corpus.model_copy(update={"n_landmarks": n_land, "nearmiss_rate": rate}),
            "retrieve": base.retrieve.model_copy(update={"nearmiss_sim": sim, "dev_methods": a.methods})})
        with tempfile.TemporaryDirectory() as tmp:
            res = dev_point(cfg, a.seed, encoder, Path(tmp))
        row = " ".join(f"{m}: R@10 {d['R@10']:.1f} calls {d['calls']:.2f} nm {d['near_misses']:.2f} "
                       f"bt% {d['backtracked']:.0f} esc {d['escalations']:.2f}" for m, d in res.items())
        print(f"n_landmarks={n_land} nearmiss_rate={rate} nearmiss_sim={sim}: {row}", flush=True)


if __name__ == "__main__":
    main()
