"""The reasoning roles through an OpenAI-compatible chat endpoint (paper profile).

``LLMReader`` has the offline ``Reader``'s interface (plan, judge, select_docs, rerank_charge,
and the calls / tokens counters), so the retrievers run unchanged. Each role is one chat call
with a JSON reply; the prompts are ours (the paper's are in its supplement), written so that an
instruction-tuned model served by vLLM, or a hosted one, can follow them. The model sees only
prompt text: the question or subquery and the candidates' texts and link titles.

Cost accounting: ``calls`` counts role calls, ``tokens_in`` / ``tokens_out`` the endpoint's
``usage`` (an estimate when the server does not report it), ``usd`` their price. Replies are
stored by prompt hash in ``cache_dir`` (with their usage) so a resumed run re-reads them and
reports the same cost without paying again; ``endpoint_calls`` counts what was actually sent.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.common.openai_client import OpenAIClient, parse_json_reply
from components.fif.reader import Candidate, Judgement, n_tokens

SYSTEM = ("You are one step of a multi-hop retrieval agent over a corpus of web pages split into "
          "paragraphs, tables and images (images are given by their caption). Reply with one JSON object only.")
RETRY_TEMPERATURE = 0.7   # a re-asked prompt (attempt > 0) is a fresh sample, not the greedy reply again

PLAN = ("Split the question into 1 to 3 subqueries, in the order they must be answered, each answerable "
        "from a single paragraph, table or image. Write #1, #2 for the answer of an earlier subquery.\n"
        'Question: {query}\nReply: {{"subqueries": ["...", "..."]}}')
JUDGE = {
    "evaluate": "Does one of the candidates answer the subquery?",
    "select": "Pick the candidate from this shortlist that answers the subquery, if any.",
}
JUDGE_TAIL = ("If the answer is an entity that the candidate links to, give that link title exactly. A subquery "
              "with (not X) rules X out as an answer.\nSubquery: {subquery}\nCandidates:\n{cands}\n"
              'Reply: {{"answerable": true or false, "index": candidate number, "answer": "short answer"}}')
SELECT_DOCS = ("Which of these pages is the subquery about? Keep every page that may hold its answer.\n"
               'Subquery: {subquery}\nPages:\n{pages}\nReply: {{"pages": [page numbers]}}')
ANSWER = ("Answer the question from the retrieved components below with a short answer: an entity, a number or "
          "a few words, not a sentence.\nQuestion: {query}\nComponents:\n{comps}\n"
          'Reply: {{"answer": "short answer"}}')
RERANK = ("Order the components by how well they answer the question, best first.\n"
          'Question: {query}\nComponents:\n{comps}\nReply: {{"order": [component numbers]}}')


@dataclass
class LLMReader:
    client: OpenAIClient
    max_reply_tokens: int = 512
    temperature: float = 0.0
    reasoning_effort: str = ""       # set for reasoning models, which take no temperature
    usd_per_mtok_in: float = 0.0
    usd_per_mtok_out: float = 0.0
    cache_dir: str = ""
    calls: int = 0
    tokens: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    endpoint_calls: int = 0
    bad_replies: int = 0             # replies without the JSON the role asks for (read as "no")
    nearmiss_accepted: int = 0       # the offline reader's diagnostic; an LLM's errors are not labelled
    cache: dict[str, Any] = field(default_factory=dict)

    def usd_of(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.usd_per_mtok_in + tokens_out * self.usd_per_mtok_out) / 1e6

    @property
    def usd(self) -> float:
        """Spent so far, from the token counters (a query's $ is ``usd_of`` its token deltas,
        exact whatever ran before it)."""
        return self.usd_of(self.tokens_in, self.tokens_out)

    # --- roles ------------------------------------------------------------------------------
    def plan(self, query: str) -> list[str]:
        reply = self._ask(PLAN.format(query=query))
        subs = reply.get("subqueries") if isinstance(reply, dict) else None
        if not (isinstance(subs, list) and subs and all(isinstance(s, str) and s.strip() for s in subs)):
            self.bad_replies += 1
            return [query]
        return [s.strip() for s in subs[:3]]

    def judge(self, subquery: str, cands: list[Candidate], role: str = "evaluate", attempt: int = 0) -> Judgement:
        if not cands:
            return Judgement(False)
        listing = "\n".join(f"[{i}] {c.text} (links: {'; '.join(c.link_titles)})" for i, c in enumerate(cands))
        reply = self._ask(JUDGE[role] + " " + JUDGE_TAIL.format(subquery=subquery, cands=listing), attempt)
        return self._judgement(reply, cands)

    def select_docs(self, subquery: str, titles: list[str], summaries: list[str]) -> list[int]:
        pages = "\n".join(f"[{i}] {t}: {s}" for i, (t, s) in enumerate(zip(titles, summaries)))
        reply = self._ask(SELECT_DOCS.format(subquery=subquery, pages=pages))
        return self._indices(reply, "pages", len(titles))

    def rerank_charge(self, query: str, texts: list[str]) -> list[int] | None:
        """The STOP reranker: an order over ``texts`` (None when there is nothing to order)."""
        if not texts:
            return None
        comps = "\n".join(f"[{i}] {t}" for i, t in enumerate(texts))
        order = self._indices(self._ask(RERANK.format(query=query, comps=comps)), "order", len(texts))
        return order + [i for i in range(len(texts)) if i not in order]

    def answer(self, query: str, texts: list[str]) -> str:
        """The QA generator: a short answer from the top retrieved components ("" if none)."""
        comps = "\n".join(f"[{i}] {t}" for i, t in enumerate(texts))
        reply = self._ask(ANSWER.format(query=query, comps=comps))
        if not isinstance(reply, dict) or not isinstance(reply.get("answer"), (str, int, float)):
            self.bad_replies += 1
            return ""
        return str(reply["answer"]).strip()

    # --- parsing ----------------------------------------------------------------------------
    def _judgement(self, reply: Any, cands: list[Candidate]) -> Judgement:
        if not isinstance(reply, dict) or not isinstance(reply.get("answerable"), bool):
            self.bad_replies += 1
            return Judgement(False)
        index = reply.get("index")
        if not reply["answerable"]:
            return Judgement(False)
        if not isinstance(index, int) or not 0 <= index < len(cands):
            self.bad_replies += 1
            return Judgement(False)
        answer = str(reply.get("answer", "")).strip()
        # an entity answer is matched to the candidate's link title, so the hop can follow it
        titles = {t.casefold(): t for t in cands[index].link_titles}
        return Judgement(True, index, titles.get(answer.casefold(), answer))

    def _indices(self, reply: Any, key: str, n: int) -> list[int]:
        values = reply.get(key) if isinstance(reply, dict) else None
        if not isinstance(values, list):
            self.bad_replies += 1
            return []
        return list(dict.fromkeys(v for v in values if isinstance(v, int) and 0 <= v < n))

    # --- one call ---------------------------------------------------------------------------
    def _ask(self, prompt: str, attempt: int = 0) -> Any:
        """The parsed JSON reply (None if the model gave no JSON), charged to the counters."""
        key = hashlib.sha256(f"{self.client.model}|{attempt}|{prompt}".encode()).hexdigest()
        entry = self.cache.get(key) or self._from_disk(key)
        if entry is None:
            entry = self._send(prompt, attempt)
            self._to_disk(key, entry)
        self.cache[key] = entry
        self.calls += 1
        t_in, t_out = entry["tokens_in"], entry["tokens_out"]
        self.tokens_in, self.tokens_out, self.tokens = self.tokens_in + t_in, self.tokens_out + t_out, \
            self.tokens + t_in + t_out
        try:
            return parse_json_reply(entry["text"])
        except ValueError:
            return None

    def _send(self, prompt: str, attempt: int) -> dict:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        body: dict[str, Any] = {"max_tokens": self.max_reply_tokens, "seed": attempt}
        if self.reasoning_effort:
            body["reasoning_effort"] = self.reasoning_effort
        else:
            body["temperature"] = self.temperature if attempt == 0 else RETRY_TEMPERATURE
        text, usage = self.client.chat_with_usage(messages, **body)
        self.endpoint_calls += 1
        return {"text": text,
                "tokens_in": int(usage.get("prompt_tokens", n_tokens(SYSTEM + " " + prompt))),
                "tokens_out": int(usage.get("completion_tokens", n_tokens(text)))}

    def _from_disk(self, key: str) -> dict | None:
        path = Path(self.cache_dir) / f"{key}.json" if self.cache_dir else None
        return json.loads(path.read_text()) if path and path.is_file() else None

    def _to_disk(self, key: str, entry: dict) -> None:
        if self.cache_dir:
            from components.common.io import write_json_atomic

            Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
            write_json_atomic(Path(self.cache_dir) / f"{key}.json", entry)


def make_llm_reader(paper) -> LLMReader:
    client = OpenAIClient(paper.reader_base_url, paper.reader_model, api_key_env=paper.reader_api_key_env)
    return LLMReader(client, paper.max_reply_tokens, reasoning_effort=paper.reasoning_effort,
                     usd_per_mtok_in=paper.usd_per_mtok_in, usd_per_mtok_out=paper.usd_per_mtok_out,
                     cache_dir=paper.cache_dir)
