"""Case-conditioned rubric generation: retrieve similar seed cases, then write <= 20 items.

Three generator backends share one interface (``RubricGenerator.generate``):
- ``template`` (default, embedded): a deterministic template writer. It reads the dialogue text
  (not the hidden facts) for context items (red flag, missing duration, pregnancy, user role,
  setting) and transfers condition-level items from the retrieved seed rubrics by a
  similarity-weighted majority vote. It is a stand-in for the paper's generator LLM, not an LLM.
- ``lm``: a local causal LM (transformers) prompted with the case and the retrieved rubrics.
- ``openai``: any OpenAI-compatible endpoint (paper profile).
Every item passes ``validate_item``; invalid ones are rejected with a reason and written out.
"""
from __future__ import annotations

import json
import re
from typing import Callable, Protocol

import numpy as np

from components.orbit.ontology import AXES, DURATIONS, PHRASES, item, user_text

MAX_ITEMS = 20
PREDICATE_KEYS = {"any", "all", "none", "pairs", "count", "min_n", "max_n"}


# ---------------------------------------------------------------- validation
def validate_item(it: dict, require_predicate: bool = False) -> str | None:
    """None if the item is valid, else the reason it is rejected."""
    crit = it.get("criterion")
    if not isinstance(crit, str) or not crit.strip():
        return "empty criterion"
    pts = it.get("points")
    if isinstance(pts, bool) or not isinstance(pts, (int, np.integer)):
        return f"points {pts!r} is not an integer"
    if not -10 <= int(pts) <= 10:
        return f"points {pts} outside [-10, 10]"
    if int(pts) == 0:
        return "zero points"
    tags = it.get("tags")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return "tags must be a list of strings"
    axes = [t for t in tags if t.startswith("axis:")]
    if len(axes) != 1 or axes[0][5:] not in AXES:
        return f"needs exactly one axis tag out of {AXES}, got {axes}"
    if not any(t in ("level:example", "level:cluster") for t in tags):
        return "missing level:example / level:cluster tag"
    if int(pts) < 0 and re.match(r"^\s*(fails to|does not|doesn't)\b", crit, re.I):
        return "negative item phrased as an omission ('Fails to ...'): describe the mistake instead"
    pred = it.get("predicate")
    if pred:
        try:
            pred = json.loads(pred) if isinstance(pred, str) else pred
        except json.JSONDecodeError:
            return "predicate is not JSON"
        if not isinstance(pred, dict) or not pred or set(pred) - PREDICATE_KEYS:
            return f"predicate keys must be a non-empty subset of {sorted(PREDICATE_KEYS)}"
        ids = list(pred.get("any", [])) + list(pred.get("all", [])) + list(pred.get("none", []))
        ids += [x for p in pred.get("pairs", []) for x in p] + list(pred.get("count", {}).get("ids", []))
        unknown = [i for i in ids if i not in PHRASES]
        if unknown:
            return f"predicate names unknown statements {unknown}"
    elif require_predicate:
        return "no checkable predicate (the rule judge needs one)"
    return None


def validate_rubric(items: list[dict], max_items: int = MAX_ITEMS,
                    require_predicate: bool = False) -> tuple[list[dict], list[dict]]:
    """(kept, rejected); each rejected entry is {"item", "reason"}."""
    kept, rejected, seen = [], [], set()
    for it in items:
        reason = validate_item(it, require_predicate)
        key = str(it.get("criterion", "")).strip().lower()
        if reason is None and key in seen:
            reason = "duplicate criterion"
        if reason is None:
            seen.add(key)
            kept.append({**it, "points": int(it["points"])})
        else:
            rejected.append({"item": it, "reason": reason})
    if len(kept) > max_items:  # keep the items that weigh most
        order = sorted(range(len(kept)), key=lambda i: -abs(kept[i]["points"]))
        keep_idx = set(order[:max_items])
        rejected += [{"item": kept[i], "reason": f"over the {max_items}-item limit"}
                     for i in range(len(kept)) if i not in keep_idx]
        kept = [kept[i] for i in range(len(kept)) if i in keep_idx]
    if kept and not any(it["points"] > 0 for it in kept):
        rejected += [{"item": it, "reason": "rubric has no positive item"} for it in kept]
        kept = []
    return kept, rejected


# ---------------------------------------------------------------- reading the dialogue
def extract_context(prompt: list[dict]) -> dict:
    """What the dialogue text says (keyword reading of the user turns)."""
    text = user_text(prompt)
    m = re.search(r"now there is also (.+?) \.", text)
    role = re.search(r"i am a (nurse|pharmacist|doctor)", text)
    return {"red_flag": m.group(1) if m else "",
            "duration_given": any(d in text for d in DURATIONS),
            "pregnant": "pregnant" in text,
            "clinician": bool(role),
            "low_resource": "far from any clinic" in text}


# ---------------------------------------------------------------- retrieval
def retrieve(query_emb: np.ndarray, pool_emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k pool rows by cosine similarity (embeddings are L2-normalised): (indices, sims)."""
    sims = pool_emb @ query_emb
    idx = np.argsort(-sims, kind="stable")[:k]
    return idx, sims[idx]


def candidate_criteria(query_emb: np.ndarray, rubrics: list[list[dict]], embed_items: Callable, k_rerank: int,
                       n: int, rerank: Callable | None = None) -> list[dict]:
    """The candidate pool of the official code's retrieval: the items of the retrieved cases
    (``rubrics``, nearest first; one per criterion text), the ``k_rerank`` nearest the query by
    embedding, reordered by ``rerank(criteria) -> scores`` when given, the first ``n``."""
    items, seen = [], set()
    for rubric in rubrics:
        for it in rubric:
            if it["criterion"] not in seen:
                seen.add(it["criterion"])
                items.append(it)
    if not items:
        return []
    sims = embed_items([it["criterion"] for it in items]) @ query_emb
    items = [items[j] for j in np.argsort(-sims, kind="stable")[:k_rerank]]
    if rerank is not None:
        scores = np.asarray(rerank([it["criterion"] for it in items]), float)
        items = [items[j] for j in np.argsort(-scores, kind="stable")]
    return items[:n]


# ---------------------------------------------------------------- generators
class RubricGenerator(Protocol):
    name: str

    def generate(self, prompt: list[dict], neighbours: list[list[dict]], sims: list[float],
                 candidates: list[dict] = ()) -> list[dict]:
        """Raw (unvalidated) items for one case, given the retrieved seed rubrics and the
        candidate criteria."""


class TemplateGenerator:
    """Deterministic stand-in for the generator LLM (see the module docstring)."""

    name = "template"

    def __init__(self, vote_share: float = 0.5):
        self.vote_share = vote_share

    def generate(self, prompt, neighbours, sims, candidates=()):
        ctx = extract_context(prompt)
        items = []
        if ctx["red_flag"]:
            items += [item(f"Tells the user to get emergency care now because of {ctx['red_flag']}.", 9,
                           "accuracy", {"any": ["emergency"]}),
                      item(f"Recommends waiting or home care although {ctx['red_flag']} is a warning sign.",
                           -7, "accuracy", {"any": ["self_care", "see_clinician", "no_care_needed"],
                                            "none": ["emergency"]})]
        else:
            items.append(item("Explains when to seek care sooner if things change.", 3, "completeness",
                              {"any": ["safety_net"]}))
        if not ctx["duration_given"]:
            items.append(item("Asks for the duration of the symptoms.", 5, "context_awareness",
                              {"any": ["ask_duration"]}))
        if ctx["pregnant"]:
            items += [item("Tells a pregnant user to check any medicine with a midwife or doctor first.", 6,
                           "context_awareness", {"any": ["pregnancy_check"]}),
                      item("Recommends ibuprofen to a pregnant user.", -6, "accuracy", {"any": ["nsaid_ok"]})]
        if ctx["clinician"]:
            items.append(item("Answers a health professional in clinical terms.", 3, "communication_quality",
                              {"any": ["clinical_terms"]}))
        else:
            items += [item("Explains things in plain language.", 2, "communication_quality",
                           {"any": ["plain_words"]}),
                      item("Uses medical jargon with a lay user.", -2, "communication_quality",
                           {"any": ["clinical_terms"]})]
        if ctx["low_resource"]:
            items.append(item("Offers an option for a setting without a nearby clinic.", 4,
                              "context_awareness", {"any": ["low_resource"]}))
        items += [item("Asks which other medicines are being taken.", 2, "context_awareness",
                       {"any": ["ask_meds"]}),
                  item("Dismisses the problem as certainly harmless.", -5, "accuracy",
                       {"any": ["diagnosis_certain"]}),
                  item("Says an examination is needed for certainty.", 2, "accuracy", {"any": ["uncertainty"]}),
                  item("Contradicts itself.", -5, "communication_quality",
                       {"pairs": [list(p) for p in _contradictions()]}),
                  item("Fills the reply with content-free phrases.", -3, "communication_quality",
                       {"count": {"ids": [k for k in PHRASES if k.startswith("filler_")], "min": 2}})]
        items += self.transfer(neighbours, sims)
        return items

    def transfer(self, neighbours: list[list[dict]], sims: list[float]) -> list[dict]:
        """Condition-level items of the retrieved rubrics, kept by similarity-weighted vote."""
        weight: dict[str, float] = {}
        first: dict[str, dict] = {}
        w = np.clip(np.asarray(sims, float), 1e-6, None)
        for rubric, wi in zip(neighbours, w):
            for it in rubric:
                if "cluster:condition" in it["tags"]:
                    weight[it["criterion"]] = weight.get(it["criterion"], 0.0) + wi
                    first.setdefault(it["criterion"], it)
        total = float(w.sum()) if len(w) else 1.0
        return [dict(first[c]) for c in first if weight[c] / total >= self.vote_share]


def _contradictions():
    from components.orbit.ontology import CONTRADICTIONS

    return CONTRADICTIONS


GENERATION_INSTRUCTIONS = """You write grading rubrics for a medical assistant's next reply in a \
consultation. Write a JSON list of at most 20 items for the conversation below. Each item is \
{"criterion": str, "points": int in [-10, 10] and not 0, "tags": ["level:example", \
"axis:<accuracy|completeness|communication_quality|context_awareness|instruction_following>"]}. \
Positive items describe what a good reply does; negative items describe a concrete mistake \
(do not phrase them as "Fails to ..."). Cover the five axes where they apply. Use the rubrics of \
similar cases below as examples of style and content. Return only the JSON list.
"""


def generation_prompt(prompt: list[dict], neighbours: list[list[dict]], candidates: list[dict] = ()) -> str:
    conv = "\n".join(f"{m['role']}: {m['content']}" for m in prompt)
    examples = "\n\n".join(json.dumps([{k: it[k] for k in ("criterion", "points", "tags")} for it in r])
                           for r in neighbours)
    pool = "\n".join(f"[{it['points']:+d}] {it['criterion']}" for it in candidates) or "none"
    return (f"{GENERATION_INSTRUCTIONS}\n# Similar cases' rubrics\n{examples}\n\n"
            f"# Candidate criteria from similar cases (ideas, not to copy)\n{pool}\n\n# Conversation\n{conv}\n")


def parse_items(text: str) -> list[dict]:
    from components.orbit.healthbench import parse_json_reply

    t = text.strip()
    if t.startswith("```"):
        t = t.strip("`")
        t = t[4:] if t.startswith("json") else t
    start, end = t.find("["), t.rfind("]")
    try:
        out = json.loads(t[start:end + 1]) if 0 <= start < end else parse_json_reply(t)
    except json.JSONDecodeError:
        return []
    return [o for o in out if isinstance(o, dict)] if isinstance(out, list) else []


class LMGenerator:
    """A local causal LM (transformers) as rubric writer; its items have no predicates, so
    they need the minilm or openai judge."""

    name = "lm"

    def __init__(self, complete: Callable[[str], str]):
        self.complete = complete

    def generate(self, prompt, neighbours, sims, candidates=()):
        return parse_items(self.complete(generation_prompt(prompt, neighbours, candidates)))


class OpenAIGenerator:
    name = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY"):
        self.base_url, self.model, self.api_key_env = base_url, model, api_key_env

    def generate(self, prompt, neighbours, sims, candidates=()):
        from components.orbit.endpoint import chat

        message = {"role": "user", "content": generation_prompt(prompt, neighbours, candidates)}
        reply = chat(self.base_url, self.model, [message], self.api_key_env)
        return parse_items(reply)


# ---------------------------------------------------------------- the stage
def make_generator(r) -> RubricGenerator:
    if r.generator == "template":
        return TemplateGenerator(r.vote_share)
    if r.generator == "openai":
        return OpenAIGenerator(r.endpoint.base_url, r.endpoint.model, r.endpoint.api_key_env)
    from components.orbit.lm import local_completer

    return LMGenerator(local_completer(r.lm_path))


def _predicate_keys(items: list[dict]) -> set[tuple[str, bool]]:
    return {(it["predicate"], it["points"] > 0) for it in items}


def generate_rubrics_stage(cfg, ctx) -> None:
    import torch

    from components.common.io import read_table, write_json_atomic, write_table
    from components.orbit.embed import Retriever, make_reranker
    from components.orbit.ontology import generic_rubric, reference_rubric

    torch.set_num_threads(1)
    r = cfg.rubrics
    cases = read_table(ctx.inputs["build_cases"] / "cases.parquet").to_pylist()
    train = [c for c in cases if c["split"] == "train"]
    pool = [c for c in cases if c["split"] == "seed_pool"]
    embed, reranker = Retriever(r), make_reranker(r)
    queries = [user_text(json.loads(c["prompt"])) for c in train]
    q = embed.queries(queries)
    pe = embed.documents([user_text(json.loads(c["prompt"])) for c in pool])
    pool_rubrics = [json.loads(c["rubrics"]) for c in pool]
    gen = make_generator(r)
    out, rejections, same_cond, precision, recall, n_cand = [], [], [], [], [], []
    for i, case in enumerate(train):
        idx, sims = retrieve(q[i], pe, max(r.top_k, r.k_cases))
        rerank = (lambda crit, query=queries[i]: reranker.score(query, crit)) if reranker else None
        candidates = candidate_criteria(q[i], [pool_rubrics[j] for j in idx], embed.documents, r.k_rerank,
                                        r.n_candidates, rerank)
        idx, sims = idx[:r.top_k], sims[:r.top_k]
        prompt = json.loads(case["prompt"])
        raw = gen.generate(prompt, [pool_rubrics[j] for j in idx], sims.tolist(), candidates)
        kept, rejected = validate_rubric(raw, r.max_items, require_predicate=gen.name == "template")
        n_cand.append(len(candidates))
        out.append({"prompt_id": case["prompt_id"], "rubrics": json.dumps(kept),
                    "neighbours": json.dumps([pool[j]["prompt_id"] for j in idx]),
                    "similarities": json.dumps([round(float(s), 4) for s in sims]),
                    "candidates": json.dumps([c["criterion"] for c in candidates])})
        rejections += [{"prompt_id": case["prompt_id"], "criterion": str(x["item"].get("criterion", "")),
                        "points": str(x["item"].get("points", "")), "reason": x["reason"]} for x in rejected]
        if case["condition"]:
            same_cond.append(np.mean([pool[j]["condition"] == case["condition"] for j in idx]))
            ref = _predicate_keys(reference_rubric(json.loads(case["visible_facts"])))
            got = _predicate_keys(kept)
            precision.append(len(got & ref) / max(1, len(got)))
            recall.append(len(got & ref) / max(1, len(ref)))
        if (i + 1) % 50 == 0:
            ctx.progress(i + 1, len(train), "rubrics")
    write_table(ctx.out_dir / "rubrics.parquet", {k: [o[k] for o in out] for k in out[0]})
    write_table(ctx.out_dir / "rejections.parquet",
                {k: [x[k] for x in rejections] for k in ("prompt_id", "criterion", "points", "reason")})
    generic = generic_rubric()
    if gen.name != "template":     # free-text rubrics: the baseline is graded by the same judge
        generic = [{**it, "predicate": ""} for it in generic]
    write_json_atomic(ctx.out_dir / "generic_rubric.json", generic)
    n_items = [len(json.loads(o["rubrics"])) for o in out]
    reasons: dict[str, int] = {}
    for x in rejections:
        reasons[x["reason"]] = reasons.get(x["reason"], 0) + 1
    ctx.write_metrics({
        "generator": gen.name, "embedder": embed.name, "reranked": reranker is not None,
        "candidates_mean": float(np.mean(n_cand)), "n_cases": len(out), "items_mean": float(np.mean(n_items)),
        "items_max": int(np.max(n_items)), "cases_without_rubric": int(sum(n == 0 for n in n_items)),
        "n_rejected": len(rejections), "rejection_reasons": reasons,
        "retrieval_same_condition": float(np.mean(same_cond)) if same_cond else None,
        "item_precision_vs_reference": float(np.mean(precision)) if precision else None,
        "item_recall_vs_reference": float(np.mean(recall)) if recall else None,
    })
