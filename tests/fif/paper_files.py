"""Test inputs of fif's paper profile: a benchmark folder in the parsed layout that
components/fif/paper.py reads (rendered from a SynthWiki corpus, with PNG images, non-contiguous
ids, a link out of the corpus, and a query with two relevant components), and a fake
OpenAI-compatible reader server that answers the role prompts of components/fif/llm_reader.py
with the offline reader's rules."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from components.common.io import write_table
from components.fif.config import FifConfig
from components.fif.corpus import generate
from components.fif.graph import split_subcomponents
from components.fif.reader import Candidate, Reader, n_tokens, read_evidence
from tests.paper.fake_endpoint import FakeEndpoint

DOC0, COMP0 = 1000, 5000     # ids in the files start here: the reader must renumber them
OUTSIDE = 999_999            # a link to a page that is not in the corpus (dropped, counted)


def write_benchmark(root: Path, seed: int = 0, n_queries: int = 12) -> Path:
    from PIL import Image

    cfg = FifConfig.for_profile("smoke").corpus.model_copy(update={"n_queries": n_queries})
    data = generate(cfg, seed)
    pages, queries = data["pages"], data["queries"]
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows, subs = [], []
    for d, page in enumerate(pages):
        for kind, text, links in page.components:
            c = len(rows)
            image = ""
            if kind == "image":
                image = f"images/{c}.png"
                Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(root / image)
            out_links = [DOC0 + x for x in links] + ([OUTSIDE] if c == 0 else [])
            rows.append((DOC0 + d, kind, text, out_links, image))
            subs += [(COMP0 + c, s) for s in split_subcomponents(kind, text)]
    write_table(root / "docs.parquet", {"doc_id": [DOC0 + d for d in range(len(pages))],
                                        "title": [p.title for p in pages], "summary": [p.summary for p in pages]})
    write_table(root / "components.parquet", {
        "comp_id": [COMP0 + c for c in range(len(rows))], "doc_id": [r[0] for r in rows],
        "kind": [r[1] for r in rows], "text": [r[2] for r in rows], "links": [r[3] for r in rows],
        "image": [r[4] for r in rows]})
    write_table(root / "subcomponents.parquet", {"comp_id": [s[0] for s in subs], "text": [s[1] for s in subs]})
    texts = [q["text"] for q in queries]
    history = [texts[max(0, i - 2):i] for i in range(len(texts))]     # a conversation: the earlier questions
    write_table(root / "queries.parquet", {"qid": [q["qid"] for q in queries], "text": texts, "history": history})
    golds = [(q["qid"], gold_answer(q["text"], [rows[q["chain"][-1]][2]])) for q in queries]
    golds.append((queries[0]["qid"], "an alternative answer"))          # a second gold answer
    write_table(root / "answers.parquet", {"qid": [q for q, _ in golds], "answer": [a for _, a in golds]})
    qrels = [(q["qid"], COMP0 + q["chain"][-1]) for q in queries]
    qrels.append((queries[0]["qid"], COMP0 + queries[0]["chain"][0]))   # a second relevant component
    write_table(root / "qrels.parquet", {"qid": [q for q, _ in qrels], "comp_id": [c for _, c in qrels]})
    return root


FIELDS = {"birth year": "born", "population": "population", "material": "material", "colour": "colour"}


def gold_answer(question: str, texts: list[str]) -> str:
    """The value the question asks for, from the first text that states it ("" if none)."""
    field = next((f for key, f in FIELDS.items() if key in question), None)
    hits = (re.search(rf"{field}: (\w+)", t) for t in texts) if field else ()
    return next((h.group(1) for h in hits if h), "")


# --- the fake reader server -------------------------------------------------------------

CAND = re.compile(r"^\[(\d+)\] (.*) \(links: (.*)\)$")


def answer(prompt: str) -> dict:
    """The JSON reply to one role prompt, by the offline reader's rules (no error flips)."""
    field = lambda name: re.search(rf"^{name}: (.*)$", prompt, re.M).group(1)  # noqa: E731
    if prompt.startswith("Split the question"):
        return {"subqueries": Reader(error=0).plan(field("Question"))}
    if prompt.startswith("Which of these pages"):
        sub = field("Subquery")
        titles = re.findall(r"^\[\d+\] (.*?): ", prompt, re.M)
        return {"pages": [i for i, t in enumerate(titles) if t in sub]}
    if prompt.startswith("Answer the question"):
        comps = re.findall(r"^\[\d+\] (.*)$", prompt.split("Components:\n", 1)[1], re.M)
        return {"answer": gold_answer(field("Question"), comps) or "unknown"}
    if prompt.startswith("Order the components"):
        return {"order": list(range(len(re.findall(r"^\[\d+\] ", prompt, re.M))))[::-1]}
    cands = [Candidate(m.group(2), [t for t in m.group(3).split("; ") if t])
             for m in map(CAND.match, prompt.split("Candidates:\n", 1)[1].split("\nReply:")[0].splitlines()) if m]
    j = read_evidence(field("Subquery"), cands, careful=prompt.startswith("Pick"))
    return {"answerable": j.answerable, "index": j.index, "answer": j.answer}


def fake_reader_server() -> FakeEndpoint:
    """The reader endpoint: each role prompt answered by ``answer``, with ``usage`` counted as
    the reader counts tokens (the cost accounting reads it)."""
    return FakeEndpoint(respond=lambda body: json.dumps(answer(body["messages"][-1]["content"])),
                        usage=lambda body, content: {"prompt_tokens": n_tokens(body["messages"][-1]["content"]),
                                                     "completion_tokens": 7})


def tiny_clip(folder: Path, tokenizer_folder: Path) -> Path:
    """A randomly initialised CLIPModel (text and vision towers) with a tiny tokenizer beside it."""
    from transformers import AutoTokenizer

    from components.common.hf_models import save_model
    from components.common.tiny_models import build_tiny

    tok = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    return save_model(build_tiny("clip", text_config={"vocab_size": len(tok)}), folder, tok)


# --- an MM-Embed-shaped encoder folder (custom code) ---------------------------------------

TINY_MMEMBED_CODE = '''"""A tiny stand-in with MM-Embed's encode() API (not its weights or architecture)."""
import numpy as np
import torch
from transformers import PretrainedConfig, PreTrainedModel


class TinyMMEmbedConfig(PretrainedConfig):
    model_type = "tiny_mmembed"

    def __init__(self, hidden_size=16, **kwargs):
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


class NVMMEmbedModel(PreTrainedModel):
    config_class = TinyMMEmbedConfig

    def __init__(self, config):
        super().__init__(config)
        self.text = torch.nn.EmbeddingBag(256, config.hidden_size, mode="mean")
        self.image = torch.nn.Linear(3, config.hidden_size)
        self.query = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()

    def encode(self, inputs, is_query=False, instruction="", max_length=32):
        rows = []
        for x in inputs:
            text = f"{instruction} {x['txt']}" if instruction else x["txt"]
            ids = torch.tensor(list(text.encode()[:max_length]) or [0])
            v = self.text(ids[None])[0]
            if x.get("img") is not None:
                v = v + self.image(torch.tensor(np.asarray(x["img"]), dtype=torch.float32).mean((0, 1)) / 255)
            rows.append(self.query(v) if is_query else v)
        return {"hidden_states": torch.stack(rows)}
'''


def tiny_mmembed(folder: Path, tokenizer_folder: Path) -> Path:
    """A save_pretrained folder whose config names NVMMEmbedModel and ships its modelling code
    (config auto_map), as nvidia/MM-Embed does, with a tiny tokenizer beside it."""
    from transformers import AutoTokenizer

    from tests.common.custom_code import save_custom_code_model

    return save_custom_code_model(folder, TINY_MMEMBED_CODE, "modeling_nvmmembed", "TinyMMEmbedConfig",
                                  "NVMMEmbedModel", AutoTokenizer.from_pretrained(str(tokenizer_folder)))
