"""Stage: run every retriever on one corpus seed. Reads queries.parquet (text only), never qrels."""
from __future__ import annotations

import json
import time

import numpy as np
import torch

from components.common.io import read_table, write_json_atomic, write_table
from components.fif.embed import make_encoder
from components.fif.evaluate import COST_COLUMNS
from components.fif.graph_index import GraphIndex
from components.fif.llm_reader import make_llm_reader
from components.fif.reader import Reader
from components.fif.retrievers import BM25, Ctx, run_method

ROBUST_METHODS = ("fif", "lilac_like", "ircot_like")  # G1 is re-measured at other reader error rates


def method_list(p, dev: bool = False) -> list[tuple[str, float]]:
    if dev:  # the dev seed serves the premise checks only: no test arm runs there
        return [(m, p.reader_error) for m in p.dev_methods]
    runs = [(m, p.reader_error) for m in p.methods]
    runs += [(f"{m}@eps{e:g}", e) for e in p.robustness_errors for m in ROBUST_METHODS if m in p.methods]
    return runs


def offline_reader(p, seed: int, encoder):
    """The deterministic reader at error rate eps (small profile, calibration, tests)."""
    return lambda eps: Reader(error=eps, seed=seed, encode=encoder.encode, nearmiss_sim=p.nearmiss_sim)


def run_all(index: GraphIndex, encoder, queries: dict, p, seed: int, progress=None, dev: bool = False,
            make_reader=None) -> dict:
    """Ranked lists, reader cost and traces for every (method, query). ``make_reader(eps)`` gives
    each method a fresh reader (default: the offline one; the paper profile's reads an endpoint)."""
    make_reader = make_reader or offline_reader(p, seed, encoder)
    cols = {k: [] for k in ("method", "qid", "ranked", "calls", "tokens", "near_misses", "latency_s", "trace")}
    bm25 = None
    runs = method_list(p, dev)
    for i, (name, eps) in enumerate(runs):
        reader = make_reader(eps)
        # subqueries go through the query side of an asymmetric encoder (MM-Embed's instruction)
        cx = Ctx(index, getattr(encoder, "encode_queries", encoder.encode), reader, p)
        for qid, text in zip(queries["qid"], queries["text"]):
            calls0, tok0, nm0, t0 = reader.calls, reader.tokens, reader.nearmiss_accepted, time.perf_counter()
            cost0 = {k: getattr(reader, k) for k in COST_COLUMNS if hasattr(reader, k)}
            if name == "bm25":
                bm25 = bm25 or BM25(index.comp_text)
                ranked, trace = [int(c) for c in np.argsort(-bm25.scores(text))[: p.top_k]], []
            else:
                ranked, trace = run_method(cx, name, text)
            cols["method"].append(name), cols["qid"].append(qid), cols["ranked"].append(ranked)
            cols["calls"].append(reader.calls - calls0), cols["tokens"].append(reader.tokens - tok0)
            cols["near_misses"].append(reader.nearmiss_accepted - nm0)
            cols["latency_s"].append(time.perf_counter() - t0), cols["trace"].append(json.dumps(trace))
            for k, v0 in cost0.items():  # an endpoint reader's input / output tokens and $
                cols.setdefault(k, []).append(getattr(reader, k) - v0)
        if progress:
            progress(i + 1, len(runs), name)
    return cols


def retrieve_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    seed = str(ctx.item["seed"])
    corpus_dir = ctx.inputs["build_corpus"][seed]
    index = GraphIndex.load(corpus_dir, ctx.inputs["build_graph"][seed], ctx.inputs["embed"][seed])
    queries = read_table(corpus_dir / "queries.parquet").to_pydict()
    encoder = make_encoder(cfg.embed, cfg.paper)
    dev = int(seed) in cfg.dev_seeds
    readers = []
    make_reader = None
    if cfg.retrieve.reader == "openai":  # paper profile: every role through the endpoint
        def make_reader(_eps):
            readers.append(make_llm_reader(cfg.paper))
            return readers[-1]
    cols = run_all(index, encoder, queries, cfg.retrieve, int(seed), ctx.progress, dev, make_reader)
    write_table(ctx.out_dir / "runs.parquet", cols)
    write_json_atomic(ctx.out_dir / "encoded_subqueries.json", {"n": len(encoder.cache)})
    metrics = {"n_runs": len(cols["qid"]), "n_encoded_texts": len(encoder.cache)}
    if readers:
        metrics.update(endpoint_calls=sum(r.endpoint_calls for r in readers),
                       bad_replies=sum(r.bad_replies for r in readers))
    ctx.write_metrics(metrics)
