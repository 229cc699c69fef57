"""Retrievers: single-shot baselines, a fixed-plan graph traversal (LILaC-like), graph-free
iterative retrieval (IRCoT-like), and the FiF orchestrator with its ablations.

FiF in our words: retrieval is a sequence of decisions over an append-only memory (subqueries
and an action history). Each TRAVERSE picks a strategy tau = (hop scope, vector granularity,
LLM reasoning). It starts at the cheapest rung and climbs a cost ladder only when the latest
attempt from the same anchor failed (a failed routing pattern may never be repeated
unchanged). When failures show that the *anchor* is wrong rather than the ranking, it
backtracks: it re-anchors at the previous successful hop and re-asks it with the dead end
(the component that led astray and the documents it pointed at) excluded, so the failed
traversal is reused as evidence instead of being thrown away.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from components.fif.graph_index import GraphIndex
from components.fif.reader import Judgement, Reader, strip_exclusions

LADDER = [(1, "none"), (2, "none"), (2, "comp"), (2, "both")]  # (granularity, LLM reasoning)
TOP = len(LADDER) - 1


@dataclass(frozen=True)
class Variant:
    backtrack: bool = True
    escalate: bool = True
    start_rung: int = 0
    pattern_rule: bool = True   # never repeat a failed (intent, anchor, tau) unchanged


VARIANTS = {
    "fif": Variant(),
    "fif_no_backtrack": Variant(backtrack=False),  # one switch only: the pattern rule stays
    "fif_no_escalation": Variant(escalate=False),
    "always_max": Variant(start_rung=TOP),
}


@dataclass
class Outcome:
    success: bool
    comp: int = -1
    answer: str = ""
    bridge: list[int] = field(default_factory=list)
    read: list[int] = field(default_factory=list)
    note: str = ""


@dataclass
class Ctx:
    """What a retriever may use: the graph, an encoder for subqueries, the reader, params."""
    index: GraphIndex
    encode: callable
    reader: Reader
    p: object          # the retrieve config section

    def qv(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


# ----------------------------------------------------------------------------- one hop
def traverse(cx: Ctx, q: str, anchors: list[int] | None, tau: tuple, excl_docs: set, excl_comps: set,
             attempt: int) -> Outcome:
    """TRAVERSE(D_anc, q, tau): document-level pick, component-level pick, then evaluation."""
    scope, gran, llm = tau
    ix, p = cx.index, cx.p
    qv = cx.qv(strip_exclusions(q))
    if scope == "local":
        cand = set(anchors) | set().union(*(ix.neighbours[d] for d in anchors))
        cand -= excl_docs
        if not cand:
            return Outcome(False, note="exhausted")
    else:
        cand = set(range(len(ix.titles))) - excl_docs
    doc_s = ix.doc_scores(qv, gran)
    first = set(anchors or [])  # the hop's own anchor pages come before their neighbours
    docs = sorted(cand, key=lambda d: (d not in first, -doc_s[d]))
    if llm == "both":  # the LLM reads the doc shortlist and keeps the documents the subquery is about
        short = docs[:p.shortlist_k]
        kept = [short[i] for i in cx.reader.select_docs(q, [ix.titles[d] for d in short],
                                                        [ix.summaries[d] for d in short])]
        docs = kept or short[:p.beam]
    else:
        docs = docs[:p.beam]
    comp_s = ix.comp_scores(qv, gran)
    comps = sorted((c for d in docs for c in ix.doc_comps[d] if c not in excl_comps),
                   key=lambda c: (int(ix.comp_doc[c]) not in first, -comp_s[c]))
    if llm == "none":
        read = comps[:p.cheap_read]
        j = cx.reader.judge(q, [ix.candidate(c) for c in read], "evaluate", attempt)
    else:
        short = comps[:p.shortlist_k]
        sel = cx.reader.judge(q, [ix.candidate(c) for c in short], "select", attempt)
        if not sel.answerable:
            return Outcome(False, read=short[:1], note="select_failed")
        read = [short[sel.index]]
        j = cx.reader.judge(q, [ix.candidate(read[0])], "evaluate", attempt)
    return _resolve(ix, j, read, excl_docs)


def _resolve(ix: GraphIndex, j: Judgement, read: list[int], excl_docs: set) -> Outcome:
    if not j.answerable:
        return Outcome(False, read=read, note="not_answerable")
    comp = read[j.index]
    bridge = [d for d in ix.comp_links[comp] if ix.titles[d] == j.answer and d not in excl_docs]
    if ix.comp_links[comp] and any(ix.titles[d] == j.answer for d in ix.comp_links[comp]) and not bridge:
        return Outcome(False, read=read, note="dead_end_again")  # re-found an excluded dead end
    return Outcome(True, comp, j.answer, bridge, read)


def render(sub: str, answers: dict[int, str]) -> str:
    return re.sub(r"#(\d+)", lambda m: answers.get(int(m.group(1)) - 1, ""), sub)


# ----------------------------------------------------------------------------- FiF family
def run_agent(cx: Ctx, query: str, variant: Variant) -> tuple[list[int], list[dict]]:
    subs = cx.reader.plan(query)
    trace: list[dict] = [{"step": 0, "action": "PLAN", "subqueries": list(subs)}]
    hop, rung = 0, variant.start_rung
    anchors: dict[int, list[int] | None] = {0: None}
    answers: dict[int, str] = {}
    ans_comp: dict[int, int] = {}
    rung_at: dict[int, int] = {}
    excl_docs: dict[int, set] = {i: set() for i in range(len(subs))}
    excl_comps: dict[int, set] = {i: set() for i in range(len(subs))}
    dead_names: dict[int, list[str]] = {i: [] for i in range(len(subs))}
    fails = local_fails = backtracks = 0
    seen = Counter()
    read: list[int] = []
    for step in range(1, cx.p.max_steps + 1):
        q = render(subs[hop], answers) + "".join(f" (not {n})" for n in dead_names[hop])
        anchor = anchors[hop]
        widen = variant.escalate and local_fails >= 2   # same neighbourhood failed twice
        scope = "global" if not anchor or widen else "local"
        tau = (scope, *LADDER[rung])
        attempt = seen[q]  # re-asking a subquery is a fresh sample, even if tau left the prompt unchanged
        seen[q] += 1
        out = traverse(cx, q, anchor, tau, excl_docs[hop], excl_comps[hop], attempt)
        read += out.read
        trace.append({"step": step, "action": "TRAVERSE", "hop": hop, "subquery": q, "anchor": anchor or [],
                      "strategy": {"scope": tau[0], "granularity": tau[1], "llm": tau[2]},
                      "outcome": "success" if out.success else "failure", "note": out.note,
                      "component": out.comp})
        if out.success:
            answers[hop], ans_comp[hop], rung_at[hop] = out.answer, out.comp, rung
            if hop == len(subs) - 1:
                break
            hop += 1
            anchors[hop] = out.bridge or None
            rung, fails, local_fails = variant.start_rung, 0, 0
            continue
        fails += 1
        local_fails += scope == "local"
        if variant.backtrack and hop > 0 and backtracks < 2 and _should_backtrack(variant, tau, fails, out):
            prev = hop - 1  # re-anchor at the latest success, excluding the dead end it led to
            # the dead end's documents are excluded and its name is negated in the rewritten
            # subquery; the component is kept: it may also state the right answer
            excl_docs[prev] |= set(anchors[hop] or [])
            dead_names[prev].append(answers[prev])
            answers.pop(prev), ans_comp.pop(prev)
            hop, rung, fails, local_fails = prev, rung_at[prev], 0, 0
            backtracks += 1
            trace.append({"step": step, "action": "BACKTRACK", "hop": hop, "anchor": anchors[hop] or [],
                          "excluded": sorted(excl_docs[hop])})
            continue
        if not variant.escalate:
            continue
        if variant.pattern_rule or fails % 2 == 0:  # without the rule: retry the same tau once first
            if rung < TOP:
                rung += 1
            elif scope == "local":
                local_fails = max(local_fails, 2)
            elif fails >= 2:
                break  # strongest mode failed twice at global scope, no backtracking left: give up
            # else: re-ask once (a rewritten prompt is a fresh sample)
    visited = list(dict.fromkeys(read))[:cx.p.shortlist_k]
    order = cx.reader.rerank_charge(query, [cx.index.comp_text[c] for c in visited])
    final = [ans_comp[h] for h in sorted(ans_comp, reverse=True)]
    if order is not None:  # an LLM reranker ordered the visited components
        return _finish(cx, query, final, [visited[i] for i in order], ordered=True), trace
    return _finish(cx, query, final, read), trace


def _should_backtrack(v: Variant, tau: tuple, fails: int, out: Outcome) -> bool:
    """The paper's triggers, read for a deterministic policy: the neighbourhood is exhausted,
    or >= 2 consecutive failures of which the latest already
    read the shortlist with the LLM (so the ranking is not what failed: the anchor is)."""
    if out.note in ("exhausted", "dead_end_again"):
        return True
    return fails >= 2 and (tau[2] != "none" or not v.escalate)


def _finish(cx: Ctx, query: str, first: list[int], others: list[int], ordered: bool = False) -> list[int]:
    """Answer components (latest hop first), then other visited components by similarity to
    the query (or in the given order, ``ordered``), then the dense ranking to fill to top_k."""
    qv = cx.qv(query)
    s = cx.index.comp_scores(qv, 1)
    rest = ([c for c in dict.fromkeys(others) if c not in set(first)] if ordered
            else sorted(set(others) - set(first), key=lambda c: -s[c]))
    out = list(dict.fromkeys(first + rest))
    for c in np.argsort(-s)[: 2 * cx.p.top_k]:
        if len(out) >= cx.p.top_k:
            break
        if int(c) not in out:
            out.append(int(c))
    return out[: cx.p.top_k]


# ----------------------------------------------------------------------------- baselines
def run_dense(cx: Ctx, query: str) -> tuple[list[int], list[dict]]:
    return _finish(cx, query, [], []), []


class BM25:
    """Okapi BM25 over component texts (k1=1.5, b=0.75)."""

    def __init__(self, texts: list[str], k1: float = 1.5, b: float = 0.75):
        self.docs = [Counter(_words(t)) for t in texts]
        self.len = np.array([sum(d.values()) for d in self.docs], float)
        df = Counter(w for d in self.docs for w in d)
        n = len(texts)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}
        self.k1, self.b, self.avg = k1, b, self.len.mean()

    def scores(self, query: str) -> np.ndarray:
        s = np.zeros(len(self.docs))
        norm = self.k1 * (1 - self.b + self.b * self.len / self.avg)
        for w in set(_words(query)):
            if w not in self.idf:
                continue
            tf = np.array([d.get(w, 0) for d in self.docs], float)
            s += self.idf[w] * tf * (self.k1 + 1) / (tf + norm)
        return s


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def run_ircot(cx: Ctx, query: str) -> tuple[list[int], list[dict]]:
    """Graph-free: each step retrieves globally with the current reasoning step as the query,
    the reader reads the shortlist and writes the bridge answer into the next step."""
    subs = cx.reader.plan(query)
    trace: list[dict] = [{"step": 0, "action": "PLAN", "subqueries": list(subs)}]
    answers: dict[int, str] = {}
    ans_comp: dict[int, int] = {}
    retrieved: list[int] = []
    hop = retry = 0
    for step in range(1, cx.p.max_steps + 1):
        q = render(subs[hop], answers)
        search = q if retry == 0 else f"{query} {q}"  # a failed step retries with the whole question
        s = cx.index.comp_scores(cx.qv(search), 2)
        short = [int(c) for c in np.argsort(-s)[: cx.p.shortlist_k]]
        retrieved = short[: cx.p.top_k] + retrieved
        j = cx.reader.judge(q, [cx.index.candidate(c) for c in short], "evaluate", retry)
        trace.append({"step": step, "action": "TRAVERSE", "hop": hop, "subquery": q, "anchor": [],
                      "strategy": {"scope": "global", "granularity": 2, "llm": "comp"},
                      "outcome": "success" if j.answerable else "failure", "note": "", "component": -1})
        if j.answerable:
            answers[hop], ans_comp[hop] = j.answer, short[j.index]
            trace[-1]["component"] = short[j.index]
            if hop == len(subs) - 1:
                break
            hop, retry = hop + 1, 0
        elif retry >= 1:
            break
        else:
            retry += 1
    final = [ans_comp[h] for h in sorted(ans_comp, reverse=True)]
    return _finish(cx, query, final, retrieved), trace


def run_lilac(cx: Ctx, query: str) -> tuple[list[int], list[dict]]:
    """Fixed plan, layered beam traversal by vector score: one pass over the plan, no
    escalation, no replanning, no backtracking. Each hop's subquery keeps its placeholder,
    filled with the previous hop's verified answer; the reader verifies each hop on the beam's
    components, and a verified answer steers the beam along its link. An unverified hop leaves
    the placeholder unfilled and the beam follows every link of the hop's components."""
    ix, p = cx.index, cx.p
    subs = cx.reader.plan(query)
    trace: list[dict] = [{"step": 0, "action": "PLAN", "subqueries": list(subs)}]
    beam: set[int] | None = None
    layers: list[list[int]] = []
    answers: dict[int, str] = {}
    verified: list[int] = []
    for hop, sub in enumerate(subs):
        q = re.sub(r"#(\d+)", lambda m: answers.get(int(m.group(1)) - 1, m.group(0)), sub)
        qv = cx.qv(q)
        cand = set(range(len(ix.titles))) if beam is None else beam | set().union(*(ix.neighbours[d] for d in beam))
        doc_s = ix.doc_scores(qv, 2)
        docs = sorted(cand, key=lambda d: -doc_s[d])[: p.beam]
        comp_s = ix.comp_scores(qv, 2)
        comps = sorted((c for d in docs for c in ix.doc_comps[d]), key=lambda c: -comp_s[c])[: p.beam]
        layers.append(comps)
        j = cx.reader.judge(q, [ix.candidate(c) for c in comps], "evaluate")
        comp = comps[j.index] if j.answerable else -1
        trace.append({"step": hop + 1, "action": "TRAVERSE", "hop": hop, "subquery": q, "anchor": sorted(beam or []),
                      "strategy": {"scope": "global" if beam is None else "local", "granularity": 2, "llm": "none"},
                      "outcome": "success" if j.answerable else "failure", "note": "", "component": comp})
        if j.answerable:
            answers[hop] = j.answer
            verified.append(comp)
            bridge = {d for d in ix.comp_links[comp] if ix.titles[d] == j.answer}
            beam = bridge or {d for c in comps for d in ix.comp_links[c]} or set(docs)
        else:
            beam = {d for c in comps for d in ix.comp_links[c]} or set(docs)
    ordered = verified[::-1] + [c for layer in reversed(layers) for c in layer]
    return _finish(cx, query, ordered, []), trace


def run_method(cx: Ctx, name: str, query: str) -> tuple[list[int], list[dict]]:
    base = name.split("@")[0]
    if base == "dense":
        return run_dense(cx, query)
    if base == "ircot_like":
        return run_ircot(cx, query)
    if base == "lilac_like":
        return run_lilac(cx, query)
    if base in VARIANTS:
        return run_agent(cx, query, VARIANTS[base])
    raise ValueError(f"unknown retriever {name!r}")
