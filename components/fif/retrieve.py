"""Stage: run every retriever on one corpus seed. Reads queries.parquet (text only), never qrels."""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

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
            make_reader=None, qa_methods: tuple = (), qa_top_k: int = 10, workers: int = 1) -> dict:
    """Ranked lists, reader cost and traces for every (method, query). ``make_reader(eps)`` gives
    each method a fresh reader (default: the offline one; the paper profile's reads an endpoint).
    For ``qa_methods`` the reader's generator also answers each query from its top ``qa_top_k``
    components (``prediction``; its calls and tokens are kept apart from retrieval's).
    ``workers > 1`` (endpoint readers only) runs a method's queries in threads, each query with
    its own reader (they share the reply cache on disk); rows stay in query order. The runs equal
    the serial ones when the endpoint answers a prompt the same way each time (greedy decoding, or
    a warm reply cache): a query's outcome depends only on its own prompts' replies."""
    make_reader = make_reader or offline_reader(p, seed, encoder)
    # subqueries go through the query side of an asymmetric encoder (MM-Embed's instruction);
    # they are encoded one text per call, so a vector never depends on what else is in a batch
    encode_query = _serialised(getattr(encoder, "encode_queries", encoder.encode)) if workers > 1 else \
        getattr(encoder, "encode_queries", encoder.encode)
    runs = method_list(p, dev)
    bm25 = BM25(index.comp_text) if any(name == "bm25" for name, _ in runs) else None
    rows: list[dict] = []
    for i, (name, eps) in enumerate(runs):
        def one(qid, text, reader, name=name):
            return _run_query(Ctx(index, encode_query, reader, p), name, qid, text, bm25,
                              name in qa_methods if qa_methods else None, qa_top_k)
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                rows += pool.map(lambda qt: one(*qt, make_reader(eps)), zip(queries["qid"], queries["text"]))
        else:
            reader = make_reader(eps)
            rows += [one(qid, text, reader) for qid, text in zip(queries["qid"], queries["text"])]
        if progress:
            progress(i + 1, len(runs), name)
    keys = list(rows[0]) if rows else list(BASE_COLUMNS)
    return {k: [r[k] for r in rows] for k in keys}


BASE_COLUMNS = ("method", "qid", "ranked", "calls", "tokens", "near_misses", "latency_s", "trace")


def _run_query(cx: Ctx, name: str, qid: str, text: str, bm25, qa: bool | None, qa_top_k: int) -> dict:
    """One row of runs.parquet: the ranking, its trace and what it cost the reader (counter
    deltas); with ``qa`` not None, the generator's answer (asked when ``qa``) and its cost."""
    reader = cx.reader
    calls0, tok0, nm0, t0 = reader.calls, reader.tokens, reader.nearmiss_accepted, time.perf_counter()
    cost0 = {k: getattr(reader, k) for k in COST_COLUMNS if hasattr(reader, k)}
    if name == "bm25":
        ranked, trace = [int(c) for c in np.argsort(-bm25.scores(text))[: cx.p.top_k]], []
    else:
        ranked, trace = run_method(cx, name, text)
    row = {"method": name, "qid": qid, "ranked": ranked, "calls": reader.calls - calls0,
           "tokens": reader.tokens - tok0, "near_misses": reader.nearmiss_accepted - nm0,
           "latency_s": time.perf_counter() - t0, "trace": json.dumps(trace)}
    row.update({k: getattr(reader, k) - v0 for k, v0 in cost0.items()})  # an endpoint's token split and $
    if "usd" in row:   # priced from this query's tokens, not a difference of running float sums
        row["usd"] = reader.usd_of(row["tokens_in"], row["tokens_out"])
    if qa is not None:
        calls0, tok0 = reader.calls, reader.tokens
        row["prediction"] = reader.answer(text, [cx.index.comp_text[c] for c in ranked[:qa_top_k]]) if qa else ""
        row["qa_calls"], row["qa_tokens"] = reader.calls - calls0, reader.tokens - tok0
    return row


def _serialised(encode):
    lock = threading.Lock()

    def locked(texts):
        with lock:
            return encode(texts)
    return locked


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
    qa = tuple(cfg.paper.qa_methods) if cfg.retrieve.reader == "openai" else ()  # offline: no generator
    cols = run_all(index, encoder, queries, cfg.retrieve, int(seed), ctx.progress, dev, make_reader, qa,
                   cfg.paper.qa_top_k, cfg.paper.query_workers)
    write_table(ctx.out_dir / "runs.parquet", cols)
    write_json_atomic(ctx.out_dir / "encoded_subqueries.json", {"n": len(encoder.cache)})
    metrics = {"n_runs": len(cols["qid"]), "n_encoded_texts": len(encoder.cache)}
    if readers:
        metrics.update(endpoint_calls=sum(r.endpoint_calls for r in readers),
                       bad_replies=sum(r.bad_replies for r in readers))
    ctx.write_metrics(metrics)
