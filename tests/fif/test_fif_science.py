"""Unit tests of the fif science: metrics, reader, graph, oracle bound, trace rules."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from components.common.context import LocalContext
from components.common.io import read_table
from components.fif.evaluate import score_runs
from components.fif.graph_index import GraphIndex
from components.fif.reader import Candidate, Reader, read_evidence
from components.fif.retrievers import LADDER, VARIANTS, Ctx, run_agent

from .conftest import BowEncoder, bow_encode


def _index(tiny) -> GraphIndex:
    return GraphIndex.load(tiny["corpus"], tiny["graph"], tiny["embed"])


def _reference_metrics(ranked, relevant, k):
    """Independent reference: position of the first relevant item via numpy."""
    hits = np.isin(np.asarray(ranked[:k]), list(relevant))
    first = int(np.argmax(hits)) if hits.any() else None
    return float(hits.any()), (0.0 if first is None else 1.0 / (first + 1))


def test_metrics_match_reference():
    rng = np.random.default_rng(0)
    runs = {k: [] for k in ("method", "qid", "ranked", "calls", "tokens", "latency_s")}
    qrels, ref = {}, {k: [] for k in ("R@1", "R@2", "R@5", "R@10", "MRR@10")}
    for i in range(200):
        ranked = [int(x) for x in rng.permutation(40)[:10]]
        rel = {int(rng.integers(0, 40))}
        qrels[f"q{i}"] = rel
        runs["method"].append("m"), runs["qid"].append(f"q{i}"), runs["ranked"].append(ranked)
        runs["calls"].append(1), runs["tokens"].append(10), runs["latency_s"].append(0.0)
        for k in (1, 2, 5, 10):
            ref[f"R@{k}"].append(100 * _reference_metrics(ranked, rel, k)[0])
        ref["MRR@10"].append(100 * _reference_metrics(ranked, rel, 10)[1])
    got = score_runs(runs, qrels)["m"]
    for key, vals in ref.items():
        assert got[key] == pytest.approx(np.mean(vals))
    assert 0 < got["R@1"] < got["R@5"] < got["R@10"]


def test_reader_reads_templates_and_respects_error_rate():
    cands = [Candidate("Voast Labs once hired Kasa Prali.", ["Kasa Prali"]),
             Candidate("Voast Labs is a mining company. Voast Labs was founded by Quin Gor.", ["Quin Gor"])]
    j = read_evidence("Who founded Voast Labs?", cands)
    assert (j.answerable, j.index, j.answer) == (True, 1, "Quin Gor")
    assert not read_evidence("Who founded Other Labs?", cands).answerable
    table = [Candidate("Infobox of The Ka Arch Replica. material: steel. height: 9 m.", []),
             Candidate("Infobox of The Ka Arch. material: bronze. height: 9 m.", [])]
    assert read_evidence("What is the material of The Ka Arch?", table).answer == "bronze"
    r = Reader(error=0.2, seed=1)
    flips = sum(not r.judge("Who founded Voast Labs?", cands, attempt=i).answerable for i in range(2000))
    assert 0.15 < flips / 2000 < 0.25  # a re-asked prompt is a fresh sample, flipped with prob. eps
    assert r.calls == 2000 and r.tokens > 2000


def test_oracle_path_reaches_full_recall(tiny):
    """Following the ground-truth hop chain through navigational edges always works, so an
    oracle policy gets R@10 = 100 (the upper bound), and every chain is link-connected."""
    ix = _index(tiny)
    qrels = read_table(tiny["corpus"] / "qrels.parquet").to_pydict()
    runs = {k: [] for k in ("method", "qid", "ranked", "calls", "tokens", "latency_s")}
    for qid, chain in zip(qrels["qid"], qrels["chain"]):
        for a, b in zip(chain[:-1], chain[1:]):
            assert int(ix.comp_doc[b]) in ix.comp_links[a], "each hop follows a hyperlink"
        runs["method"].append("oracle"), runs["qid"].append(qid), runs["ranked"].append(list(chain)[::-1])
        runs["calls"].append(0), runs["tokens"].append(0), runs["latency_s"].append(0.0)
    gt = {q: {int(c)} for q, c in zip(qrels["qid"], qrels["comp_id"])}
    assert score_runs(runs, gt)["oracle"]["R@10"] == 100.0


def test_vector_granularity_is_max_over_descendants(tiny):
    ix = _index(tiny)
    qv = bow_encode(["Who founded Voast Labs"])[0]
    s2 = ix.comp_scores(qv, 2)
    for c in range(0, len(ix.comp_text), 7):
        subs = np.flatnonzero(ix.sub_comp == c)
        assert s2[c] == pytest.approx(float((ix.e_sub[subs] @ qv).max()), abs=1e-6)
    d = ix.doc_scores(qv, 1)
    assert d[0] == pytest.approx(float((ix.e_comp[ix.doc_comps[0]] @ qv).max()), abs=1e-6)


def _agent_traces(tiny, variant="fif", eps=0.3):
    ix = _index(tiny)
    cfg = tiny["cfg"].retrieve
    queries = read_table(tiny["corpus"] / "queries.parquet").to_pydict()["text"]
    cx = Ctx(ix, BowEncoder().encode, Reader(error=eps, seed=0), cfg)
    return [run_agent(cx, q, VARIANTS[variant])[1] for q in queries]


def test_traces_well_formed_and_follow_the_rules(tiny):
    for trace in _agent_traces(tiny):
        assert trace[0]["action"] == "PLAN" and trace[0]["subqueries"]
        rung_of = {tuple(r): i for i, r in enumerate(LADDER)}
        last = {}
        failed_patterns = set()
        for t in trace[1:]:
            if t["action"] == "BACKTRACK":
                last.clear()
                continue
            assert t["action"] == "TRAVERSE"
            assert set(t["strategy"]) == {"scope", "granularity", "llm"}
            assert isinstance(t["anchor"], list) and t["outcome"] in ("success", "failure")
            s = t["strategy"]
            key = (t["hop"], tuple(t["anchor"]))
            rung = rung_of[(s["granularity"], s["llm"])]
            assert rung >= last.get(key, 0), "escalation is monotonic within an anchor"
            last[key] = rung
            pattern = (t["subquery"], tuple(t["anchor"]), s["scope"], s["granularity"], s["llm"])
            if t["outcome"] == "failure":
                # a failed routing pattern is re-asked at most once, and only at the top rung
                assert pattern not in failed_patterns or rung == len(LADDER) - 1
                failed_patterns.add(pattern)


def test_retrieval_never_reads_qrels(tiny, tmp_path, monkeypatch):
    """Runs are identical with the qrels file removed or shuffled: retrievers cannot see them."""
    import components.fif.retrieve as retrieve

    monkeypatch.setattr(retrieve, "make_encoder", lambda *_: BowEncoder())
    cfg = tiny["cfg"].model_copy(update={"retrieve": tiny["cfg"].retrieve.model_copy(
        update={"methods": ["fif", "ircot_like", "lilac_like"], "robustness_errors": []})})
    outs = []
    for variant in ("kept", "removed"):
        corpus = tmp_path / f"corpus_{variant}"
        shutil.copytree(tiny["corpus"], corpus)
        if variant == "removed":
            (corpus / "qrels.parquet").unlink()
        ctx = LocalContext(out_dir=tmp_path / variant, item={"seed": 0}, inputs={
            "build_corpus": {"0": corpus}, "build_graph": {"0": tiny["graph"]}, "embed": {"0": tiny["embed"]}})
        retrieve.retrieve_stage(cfg, ctx)
        runs = read_table(tmp_path / variant / "runs.parquet").to_pydict()
        outs.append((runs["ranked"], runs["calls"], runs["trace"]))
    assert outs[0] == outs[1]
    assert any(json.loads(t) for t in outs[0][2])


def test_each_ablation_switches_off_one_thing():
    """Regression: fif_no_backtrack used to switch off the failed-pattern rule too."""
    full = VARIANTS["fif"]
    for name in ("fif_no_backtrack", "fif_no_escalation"):
        v = VARIANTS[name]
        changed = [f for f in full.__dataclass_fields__ if getattr(v, f) != getattr(full, f)]
        assert len(changed) == 1, (name, changed)


def _fake_encode(pairs_sim: float):
    """Encoder whose cosine between any two different texts is ``pairs_sim``."""
    def encode(texts):
        a = np.array([1.0, 0.0])
        b = np.array([pairs_sim, np.sqrt(1 - pairs_sim ** 2)])
        return np.stack([a if i == 0 else b for i in range(len(texts))])
    return encode


def test_reader_takes_near_misses_by_similarity():
    near = Candidate("Kaloren Mitas lived in Tasford. Kaloren Mitas worked with Sun Belmar.", ["Tasford", "Sun Belmar"])
    exact = Candidate("Kaloren Mitas is a poet. Kaloren Mitas was born in Mirenburg.", ["Mirenburg"])
    q = "Where was Kaloren Mitas born?"
    hasty = Reader(error=0.0, encode=_fake_encode(0.8), nearmiss_sim=0.7)
    j = hasty.judge(q, [near, exact])
    assert (j.answer, j.note) == ("Tasford", "near_miss") and hasty.nearmiss_accepted == 1
    assert hasty.judge(q, [exact, near]).answer == "Mirenburg"          # exact evidence read first
    assert hasty.judge(q, [near, exact], role="select").answer == "Mirenburg"  # careful: exact anywhere wins
    below = Reader(error=0.0, encode=_fake_encode(0.6), nearmiss_sim=0.7)
    assert below.judge(q, [near, exact]).answer == "Mirenburg"
    assert not below.judge(q, [near]).answerable
    assert Reader(error=0.0, encode=_fake_encode(0.8), nearmiss_sim=0.7).judge(q, [near], role="select").answer == "Tasford"
    # value hops (infobox rows) are never near misses
    assert not hasty.judge("What is the birth year of Kaloren Mitas?", [near]).answerable


def test_lilac_keeps_the_placeholder_and_verifies_each_hop(tiny):
    """Regression: lilac_like used to drop '#i' from sub-queries ("Where was born?") and
    never asked the reader; now each hop is verified and fills the next placeholder."""
    from components.fif.retrievers import run_lilac

    ix = _index(tiny)
    queries = read_table(tiny["corpus"] / "queries.parquet").to_pydict()["text"]
    reader = Reader(error=0.0, seed=0)
    cx = Ctx(ix, BowEncoder().encode, reader, tiny["cfg"].retrieve)
    filled = 0
    for q in queries:
        calls0 = reader.calls
        _, trace = run_lilac(cx, q)
        hops = [t for t in trace if t["action"] == "TRAVERSE"]
        assert reader.calls - calls0 == 1 + len(hops)  # one plan call, one verification per hop
        for prev, t in zip(hops, hops[1:]):
            assert "  " not in t["subquery"] and not t["subquery"].startswith(("Where was born", "What is the birth year of?"))
            if prev["outcome"] == "success":
                assert "#" not in t["subquery"]
                filled += 1
            else:
                assert "#" in t["subquery"]
    assert filled > 0


def test_firing_counts_of_a_trace():
    from components.fif.evaluate import firing_counts

    def tr(hop, scope, g, llm, outcome="failure"):
        return {"action": "TRAVERSE", "hop": hop, "strategy": {"scope": scope, "granularity": g, "llm": llm},
                "outcome": outcome}
    trace = [{"action": "PLAN"}, tr(0, "global", 1, "none", "success"), tr(1, "local", 1, "none"),
             tr(1, "local", 2, "none"), tr(1, "global", 2, "comp"), {"action": "BACKTRACK", "hop": 0},
             tr(0, "global", 1, "none", "success")]
    assert firing_counts(trace) == {"backtracks": 1, "escalations": 2, "widenings": 1, "backtracked": 1.0}


def test_dev_seed_runs_only_the_premise_arms():
    from components.fif.config import FifConfig
    from components.fif.retrieve import method_list

    cfg = FifConfig()
    assert set(cfg.dev_seeds).isdisjoint(cfg.seeds)  # calibration never touches a test seed
    assert [m for m, _ in method_list(cfg.retrieve, dev=True)] == cfg.retrieve.dev_methods


def test_shared_sentence_encoder_is_used_by_fif_and_orbit():
    from components.common.minilm import SentenceEncoder
    from components.fif.embed import MiniLMEncoder
    from components.orbit.embed import Embedder

    assert issubclass(MiniLMEncoder, SentenceEncoder) and Embedder is SentenceEncoder
