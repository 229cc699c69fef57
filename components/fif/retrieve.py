"""Stage: run every retriever on one corpus seed. Reads queries.parquet (text only), never qrels."""
from __future__ import annotations

import json
import time

import numpy as np
import torch

from components.common.io import read_table, write_json_atomic, write_table
from components.fif.embed import MiniLMEncoder
from components.fif.graph_index import GraphIndex
from components.fif.reader import Reader
from components.fif.retrievers import BM25, Ctx, run_method

ROBUST_METHODS = ("fif", "lilac_like", "ircot_like")  # G1 is re-measured at other reader error rates


def method_list(p, dev: bool = False) -> list[tuple[str, float]]:
    if dev:  # the dev seed serves the premise checks only: no test arm runs there
        return [(m, p.reader_error) for m in p.dev_methods]
    runs = [(m, p.reader_error) for m in p.methods]
    runs += [(f"{m}@eps{e:g}", e) for e in p.robustness_errors for m in ROBUST_METHODS if m in p.methods]
    return runs


def run_all(index: GraphIndex, encoder, queries: dict, p, seed: int, progress=None, dev: bool = False) -> dict:
    """Ranked lists, reader cost and traces for every (method, query)."""
    if p.reader != "reader":
        raise NotImplementedError("only the offline deterministic reader is wired at CPU scale")
    cols = {k: [] for k in ("method", "qid", "ranked", "calls", "tokens", "near_misses", "latency_s", "trace")}
    bm25 = None
    runs = method_list(p, dev)
    for i, (name, eps) in enumerate(runs):
        reader = Reader(error=eps, seed=seed, encode=encoder.encode, nearmiss_sim=p.nearmiss_sim)
        cx = Ctx(index, encoder.encode, reader, p)
        for qid, text in zip(queries["qid"], queries["text"]):
            calls0, tok0, nm0, t0 = reader.calls, reader.tokens, reader.nearmiss_accepted, time.perf_counter()
            if name == "bm25":
                bm25 = bm25 or BM25(index.comp_text)
                ranked, trace = [int(c) for c in np.argsort(-bm25.scores(text))[: p.top_k]], []
            else:
                ranked, trace = run_method(cx, name, text)
            cols["method"].append(name), cols["qid"].append(qid), cols["ranked"].append(ranked)
            cols["calls"].append(reader.calls - calls0), cols["tokens"].append(reader.tokens - tok0)
            cols["near_misses"].append(reader.nearmiss_accepted - nm0)
            cols["latency_s"].append(time.perf_counter() - t0), cols["trace"].append(json.dumps(trace))
        if progress:
            progress(i + 1, len(runs), name)
    return cols


def retrieve_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    seed = str(ctx.item["seed"])
    corpus_dir = ctx.inputs["build_corpus"][seed]
    index = GraphIndex.load(corpus_dir, ctx.inputs["build_graph"][seed], ctx.inputs["embed"][seed])
    queries = read_table(corpus_dir / "queries.parquet").to_pydict()
    encoder = MiniLMEncoder(cfg.embed.max_tokens, cfg.embed.batch)
    dev = int(seed) in cfg.dev_seeds
    cols = run_all(index, encoder, queries, cfg.retrieve, int(seed), ctx.progress, dev)
    write_table(ctx.out_dir / "runs.parquet", cols)
    write_json_atomic(ctx.out_dir / "encoded_subqueries.json", {"n": len(encoder.cache)})
    ctx.write_metrics({"n_runs": len(cols["qid"]), "n_encoded_texts": len(encoder.cache)})
