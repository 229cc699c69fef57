"""The reasoning client: one interface, a deterministic offline backend.

``Reader`` stands in for the LLM roles (planner, component selector, traversal evaluator,
reranker). It receives only prompt strings: the query or subquery and the candidate texts
with their link anchor titles. It never sees ids, qrels or generator metadata. It reads the
SynthWiki sentence templates the way a careful LLM would, and with probability ``error`` a
judgement is flipped (LLM noise): an answerable hop is called unanswerable, or an
unanswerable one is "answered" with a plausible but wrong anchor. Every call is charged the
token length of the prompt that would have been sent, and answers are memoised by prompt
hash (a resumed run never pays twice; ``attempt`` models re-sampling a retried prompt).

Errors depend on content, not only on chance: a hasty reading accepts a *near-miss* sentence
("X lived in C" for "Where was X born?") when it is about the asked subject, names a linked
entity, and is close to the subquery in MiniLM space (cosine >= ``nearmiss_sim``). A cheap
evaluation reads candidates in the order given and takes the first sentence that looks right;
a selection with LLM reasoning first looks for exact evidence in the whole shortlist and falls
back to a near miss only when there is none.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

# instruction overheads (tokens) of the paper's role prompts, roughly; the same for every method
ROLE_TOKENS = {"plan": 400, "select": 300, "evaluate": 350, "rerank": 250}

PLANS = [  # query template -> subqueries; #i is the answer of subquery i (under-specified hops)
    (r"What is the birth year of the founder of (.+)\?$", ["Who founded {0}?", "What is the birth year of #1?"]),
    (r"What is the population of the city where the founder of (.+) was born\?$",
     ["Who founded {0}?", "Where was #1 born?", "What is the population of #2?"]),
    (r"What is the material of the landmark in the city where (.+) was born\?$",
     ["Where was {0} born?", "Which landmark is in #1?", "What is the material of #2?"]),
    (r"What colour is the landmark in the city where (.+) is headquartered\?$",
     ["Where is {0} headquartered?", "Which landmark is in #1?", "What colour is #2?"]),
]
ANSWERS = [  # subquery -> evidence pattern (subject substituted) in a candidate text
    (r"Who founded (.+)\?", r"{s} was founded by ([^.]+)\."),
    (r"Where was (.+) born\?", r"{s} was born in ([^.]+)\."),
    (r"Where is (.+) headquartered\?", r"{s} is headquartered in ([^.]+)\."),
    (r"Which landmark is in (.+)\?", r"{s} is home to ([^.]+)\."),
    (r"What is the birth year of (.+)\?", r"^Infobox of {s}\. .*?born: (\d+)"),
    (r"What is the population of (.+)\?", r"^Infobox of {s}\. .*?population: (\d+)"),
    (r"What is the material of (.+)\?", r"^Infobox of {s}\. .*?material: (\w+)"),
    (r"What colour is (.+)\?", r"^Image of {s}\. .*?colour: (\w+)"),
]


def n_tokens(text: str) -> int:
    return int(round(len(text.split()) * 4 / 3))  # ~0.75 words per BPE token


@dataclass
class Candidate:
    text: str
    link_titles: list[str]


@dataclass
class Judgement:
    answerable: bool
    index: int = -1        # which candidate holds the answer
    answer: str = ""
    note: str = ""         # "near_miss" when a near-miss sentence was taken for evidence


@dataclass
class Reader:
    error: float = 0.1
    seed: int = 0
    encode: object = None          # sentence encoder (texts -> unit vectors); None: never fooled
    nearmiss_sim: float = 1.01     # cosine above which a near-miss sentence is accepted
    nearmiss_accepted: int = 0     # how many judgements took a near miss (diagnostic)
    calls: int = 0
    tokens: int = 0
    cache: dict[str, object] = field(default_factory=dict)

    def _charge(self, role: str, prompt: str) -> None:
        self.calls += 1
        self.tokens += ROLE_TOKENS[role] + n_tokens(prompt) + 20  # + a short JSON answer

    def _flip(self, prompt: str, attempt: int) -> bool:
        h = hashlib.blake2b(f"{prompt}|seed={self.seed}|attempt={attempt}".encode(), digest_size=8).digest()
        return int.from_bytes(h, "big") / 2 ** 64 < self.error

    def plan(self, query: str) -> list[str]:
        self._charge("plan", query)
        for pattern, subs in PLANS:
            m = re.match(pattern, query)
            if m:
                return [s.format(m.group(1)) for s in subs]
        return [query]

    def judge(self, subquery: str, cands: list[Candidate], role: str = "evaluate", attempt: int = 0) -> Judgement:
        """Is ``subquery`` answerable from ``cands``? If so, by which candidate, and what is
        the answer (an entity name for a bridge hop, a value for the last hop)."""
        prompt = subquery + "\n" + "\n".join(f"[{i}] {c.text} (links: {'; '.join(c.link_titles)})"
                                             for i, c in enumerate(cands))
        self._charge(role, prompt)
        key = hashlib.sha1(f"{role}|{attempt}|{prompt}".encode()).hexdigest()
        if key not in self.cache:
            self.cache[key] = self._read(subquery, cands, prompt, attempt, role)
        return self.cache[key]

    def _read(self, subquery: str, cands: list[Candidate], prompt: str, attempt: int, role: str) -> Judgement:
        truth = read_evidence(subquery, cands, self._near_miss, careful=role == "select")
        if truth.note == "near_miss":
            self.nearmiss_accepted += 1
        if not self._flip(prompt, attempt) or not cands:
            return truth
        if truth.answerable:
            return Judgement(False)
        # a confident mistake: the top candidate, and one of its anchors as the "answer"
        top = cands[0]
        h = int(hashlib.sha1(prompt.encode()).hexdigest(), 16)
        answer = top.link_titles[h % len(top.link_titles)] if top.link_titles else top.text.split(":")[-1].strip(" .")
        return Judgement(True, 0, answer)

    def _near_miss(self, subquery: str, sentence: str) -> bool:
        if self.encode is None or self.nearmiss_sim > 1:
            return False
        a, b = self.encode([strip_exclusions(subquery), sentence])
        return float(a @ b) >= self.nearmiss_sim

    def select_docs(self, subquery: str, titles: list[str], summaries: list[str]) -> list[int]:
        """Document-level LLM reasoning: keep the pages the subquery names (charged like a rerank)."""
        self.rerank_charge(subquery, summaries)
        return [i for i, t in enumerate(titles) if t in subquery]

    def rerank_charge(self, query: str, texts: list[str]) -> None:
        """The STOP reranker's cost; the offline reader keeps the retriever's order (None)."""
        self._charge("rerank", query + "\n" + "\n".join(texts))


def strip_exclusions(subquery: str) -> str:
    return subquery.split(" (not ")[0]


def exclusions(subquery: str) -> set[str]:
    """Names a rewritten subquery rules out: "Where was X born? (not A) (not B)" -> {A, B}."""
    return set(re.findall(r" \(not ([^)]+)\)", subquery))


BRIDGE_RELATIONS = 4  # the first ANSWERS entries name an entity (a hop to another page)


def sentences(text: str) -> list[str]:
    return [t.strip(" .") + "." for t in text.split(". ") if t.strip(" .")]


def read_evidence(subquery: str, cands: list[Candidate], near_miss=None, careful: bool = False) -> Judgement:
    """The first sentence stating the subquery's relation for its subject (an answer the
    subquery rules out is skipped). With ``near_miss`` (subquery, sentence) -> bool, a bridge
    hop may instead take a sentence about the subject that names a linked entity and that
    ``near_miss`` finds close enough: a hasty reading takes whichever comes first in reading
    order; a ``careful`` one takes a near miss only when no exact evidence exists."""
    q = strip_exclusions(subquery)
    banned = exclusions(subquery)
    for r, (q_pat, ev_pat) in enumerate(ANSWERS):
        m = re.fullmatch(q_pat, q)
        if not m:
            continue
        subject = m.group(1)
        ev = re.compile(ev_pat.format(s=re.escape(subject)))
        exact = next((Judgement(True, i, hit.group(1)) for i, c in enumerate(cands)
                      for hit in [ev.search(c.text)] if hit and hit.group(1) not in banned), Judgement(False))
        if near_miss is None or r >= BRIDGE_RELATIONS or (careful and exact.answerable):
            return exact
        for i, c in enumerate(cands):
            for sent in sentences(c.text):
                hit = ev.search(sent)
                if hit and hit.group(1) not in banned:
                    return Judgement(True, i, hit.group(1))
                if hit or not sent.startswith(subject + " "):
                    continue
                named = [t for t in c.link_titles if t in sent[len(subject):] and t not in banned]
                if named and near_miss(subquery, sent):
                    return Judgement(True, i, named[0], note="near_miss")
        return exact
    return Judgement(False)
