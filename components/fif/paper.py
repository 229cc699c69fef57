"""The paper profile's inputs: a parsed benchmark corpus from a local folder, checked before
anything runs, and read into the same tables the SynthWiki generator writes.

The paper evaluates on MultimodalQA, MMCoQA and WebQA as LILaC reconstructs them (pages split
into paragraphs, tables and images; sentences, table segments and visual objects below them;
hyperlinks between pages). LILaC's parser writes one JSON per page; we read a flattened parquet
form of that graph, one folder per benchmark (``corpus.data_root``):

- ``docs.parquet``: ``doc_id`` (int), ``title`` (str), ``summary`` (str, the V0 page summary)
- ``components.parquet``: ``comp_id`` (int), ``doc_id`` (int), ``kind`` (str: paragraph, table or
  image), ``text`` (str: paragraph text, linearised table, or image caption/summary), ``links``
  (list of doc ids the component links to), ``image`` (str: image file relative to the folder,
  "" for text components)
- ``subcomponents.parquet``: ``comp_id`` (int), ``text`` (str): sentences, table segments (rows)
  and image tags / visual objects, in reading order
- ``queries.parquet``: ``qid`` (str), ``text`` (str)
- ``qrels.parquet``: ``qid`` (str), ``comp_id`` (int): one row per relevant component
- optional ``answers.parquet``: ``qid`` (str), ``answer`` (str): one row per gold answer, for QA
  EM/F1 (the retrievers never read it)
- optional column ``history`` of ``queries.parquet`` (list of str): the conversation's earlier
  turns, oldest first (MMCoQA); the last ``corpus.history_turns`` of them are appended to the
  question (after it, so that a truncating encoder keeps the question itself)

Ids may be any integers; they are renumbered in file order. Links to pages outside the corpus
are dropped (and counted); a query without a relevant component is dropped (and counted).
"""
from __future__ import annotations

from pathlib import Path

from components.common.preflight import PreflightError, require_checkpoint, require_dir, require_tokenizer

COLUMNS = {
    "docs.parquet": {"doc_id": "integer", "title": "string", "summary": "string"},
    "components.parquet": {"comp_id": "integer", "doc_id": "integer", "kind": "string", "text": "string",
                           "links": "list", "image": "string"},
    "subcomponents.parquet": {"comp_id": "integer", "text": "string"},
    "queries.parquet": {"qid": "string", "text": "string"},
    "qrels.parquet": {"qid": "string", "comp_id": "integer"},
}
OPTIONAL = {"answers.parquet": {"qid": "string", "answer": "string"}}
LAYOUT = ("a parsed benchmark folder with " + ", ".join(
    f"{name} ({', '.join(cols)})" for name, cols in COLUMNS.items()) + " (see components/fif/paper.py)")
ENCODER_LAYOUT = ("a save_pretrained encoder folder with its tokenizer (nvidia/MM-Embed with "
                  "paper.trust_remote_code=true, CLIP, e.g. openai/clip-vit-large-patch14, "
                  "or a text encoder such as sentence-transformers/all-MiniLM-L6-v2)")
KINDS = ("paragraph", "table", "image")


# --- preflight ---------------------------------------------------------------------------

def preflight_paper(cfg) -> None:
    """Every path and endpoint the paper profile needs, checked in one line each."""
    from components.common.devices import resolve_device
    from components.fif.config import BENCHMARKS, MINILM

    p = cfg.paper
    if cfg.corpus.source not in ("synthwiki", "local"):
        raise ValueError(f"corpus.source must be synthwiki or local (got {cfg.corpus.source!r})")
    if cfg.corpus.source == "local":
        root = require_dir("corpus.data_root", cfg.corpus.data_root, LAYOUT, patterns=tuple(COLUMNS))
        check_schemas(root, cfg.corpus.data_root)
        if cfg.corpus.history_turns and "history" not in pq_names(root / "queries.parquet"):
            raise PreflightError("corpus.history_turns", str(cfg.corpus.history_turns), "0, or a queries.parquet "
                                 "with a history column (list of earlier turns)", "needs a history column")
    if cfg.embed.embedder != MINILM:
        require_checkpoint("embed.embedder", cfg.embed.embedder, ENCODER_LAYOUT)
        require_tokenizer("embed.embedder", cfg.embed.embedder, ENCODER_LAYOUT)
        check_custom_code(cfg.embed.embedder, p.trust_remote_code)
    if cfg.retrieve.reader not in ("reader", "openai"):
        raise ValueError(f"retrieve.reader must be reader (offline) or openai (got {cfg.retrieve.reader!r})")
    if cfg.corpus.source == "local" and cfg.retrieve.reader == "reader":
        raise ValueError("retrieve.reader = reader (offline) reads only SynthWiki's sentence templates; "
                         "set retrieve.reader = openai for a local benchmark")
    if cfg.retrieve.reader == "openai":
        if not p.reader_base_url.startswith(("http://", "https://")):
            raise PreflightError("paper.reader_base_url", p.reader_base_url,
                                 "an OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (vLLM)",
                                 "is not set" if not p.reader_base_url else "is not an http(s) URL")
        if not p.reader_model:
            raise PreflightError("paper.reader_model", "", "the model name the endpoint serves", "is not set")
    if p.query_workers < 1 or (p.query_workers > 1 and cfg.retrieve.reader != "openai"):
        raise ValueError(f"paper.query_workers must be 1, or > 1 with retrieve.reader = openai (got "
                         f"{p.query_workers}; the offline reader's memo is shared by a method's queries)")
    if p.benchmark and p.benchmark not in BENCHMARKS:
        raise ValueError(f"paper.benchmark must be one of {', '.join(BENCHMARKS)} (got {p.benchmark!r})")
    if p.pooling not in ("mean", "cls"):
        raise ValueError(f"paper.pooling must be mean or cls (got {p.pooling!r})")
    resolve_device(p.device)


def pq_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_schema(path).names


def check_custom_code(folder: str, trusted: bool) -> None:
    """A folder that ships its own modelling code (config ``auto_map``) runs it only when
    ``paper.trust_remote_code`` says so, and only MM-Embed's API is wired."""
    from components.common.hf_models import read_config
    from components.fif.config import MMEMBED_ARCH

    config = read_config(folder)
    if "auto_map" not in config:
        return
    if not trusted:
        raise PreflightError("paper.trust_remote_code", "false", "true to run the modelling code the encoder "
                             "folder ships (MM-Embed needs it)", f"but {folder} ships custom code (config auto_map)")
    if MMEMBED_ARCH not in config.get("architectures", []):
        raise PreflightError("embed.embedder", folder, ENCODER_LAYOUT + f", or MM-Embed ({MMEMBED_ARCH})",
                             f"ships custom code for {config.get('architectures')}, whose API is not wired")


def check_schemas(root: Path, value: str) -> None:
    """Column names of the five tables, from the parquet footers only (cheap); their types are
    checked when build_corpus reads them."""
    import pyarrow.parquet as pq

    for name, columns in COLUMNS.items():
        try:
            schema = pq.read_schema(root / name)
        except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise PreflightError("corpus.data_root", value, LAYOUT, f"has an unreadable {name} ({err})") from None
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise PreflightError("corpus.data_root", value, LAYOUT, f"has {name} without column(s) {missing}")
    for name, columns in OPTIONAL.items():
        if (root / name).is_file():
            missing = [c for c in columns if c not in pq.read_schema(root / name).names]
            if missing:
                raise PreflightError("corpus.data_root", value, LAYOUT, f"has {name} without column(s) {missing}")


# --- build_corpus for a local benchmark ------------------------------------------------------

def read_local_corpus(root: str | Path, n_queries: int = 0, history_turns: int = 0) -> tuple[dict, dict]:
    """The five tables (and gold answers when given), validated (``DatasetError`` names file and
    field), ids renumbered in file order; returns (tables in the SynthWiki stage's column
    layout, counts)."""
    from components.common.readers import DatasetError, read_parquet

    root = Path(root).expanduser()
    t = {name: read_parquet(str(root / name), cols).to_pydict() for name, cols in COLUMNS.items()}
    docs, comps, subs, queries, qrels = (t[n] for n in COLUMNS)
    doc_ix = _renumber(docs["doc_id"], root / "docs.parquet", "doc_id")
    comp_ix = _renumber(comps["comp_id"], root / "components.parquet", "comp_id")
    bad_kind = sorted(set(comps["kind"]) - set(KINDS))
    if bad_kind:
        raise DatasetError(f"{root / 'components.parquet'}: kind must be one of {KINDS}, got {bad_kind[:3]}")
    unknown = [d for d in comps["doc_id"] if d not in doc_ix]
    if unknown:
        raise DatasetError(f"{root / 'components.parquet'}: doc_id {unknown[0]} is not in docs.parquet")
    links, dropped = [], 0
    for ls in comps["links"]:
        kept = [doc_ix[d] for d in ls if d in doc_ix]
        dropped += len(ls) - len(kept)
        links.append(kept)
    images = []
    for kind, rel in zip(comps["kind"], comps["image"]):
        if kind == "image" and rel and not (root / rel).is_file():
            raise DatasetError(f"{root / 'components.parquet'}: image {rel!r} not found under {root}")
        images.append(str(root / rel) if kind == "image" and rel else "")
    for c in subs["comp_id"]:
        if c not in comp_ix:
            raise DatasetError(f"{root / 'subcomponents.parquet'}: comp_id {c} is not in components.parquet")
    relevant: dict[str, list[int]] = {}
    for q, c in zip(qrels["qid"], qrels["comp_id"]):
        if c not in comp_ix:
            raise DatasetError(f"{root / 'qrels.parquet'}: comp_id {c} (query {q!r}) is not in components.parquet")
        relevant.setdefault(q, []).append(comp_ix[c])
    keep = [i for i, q in enumerate(queries["qid"]) if q in relevant]
    keep = keep[:n_queries] if n_queries else keep
    qids = [queries["qid"][i] for i in keep]
    texts = [queries["text"][i] for i in keep]
    if history_turns:
        texts = with_history(texts, _history(root, keep), history_turns)
    tables = {
        "docs": {"doc_id": list(range(len(doc_ix))), "title": docs["title"], "kind": ["page"] * len(doc_ix),
                 "summary": docs["summary"]},
        "components": {"comp_id": list(range(len(comp_ix))), "doc_id": [doc_ix[d] for d in comps["doc_id"]],
                       "kind": comps["kind"], "text": comps["text"], "links": links, "image": images},
        "subcomponents": {"comp_id": [comp_ix[c] for c in subs["comp_id"]], "text": subs["text"]},
        "queries": {"qid": qids, "text": texts},
        "qrels": {"qid": [q for q in qids for _ in relevant[q]], "comp_id": [c for q in qids for c in relevant[q]],
                  "template": [-1 for q in qids for _ in relevant[q]],
                  "chain": [[c] for q in qids for c in relevant[q]]},
    }
    counts = {"n_docs": len(doc_ix), "n_components": len(comp_ix), "n_subcomponents": len(subs["comp_id"]),
              "n_queries": len(qids), "n_queries_without_qrels": len(queries["qid"]) - len(relevant.keys() &
                                                                                             set(queries["qid"])),
              "n_qrels": len(tables["qrels"]["qid"]), "n_links_dropped": dropped,
              "n_images": sum(bool(x) for x in images)}
    if (root / "answers.parquet").is_file():
        answers = read_parquet(str(root / "answers.parquet"), OPTIONAL["answers.parquet"]).to_pydict()
        kept = set(qids)
        rows = [(q, a) for q, a in zip(answers["qid"], answers["answer"]) if q in kept]
        tables["answers"] = {"qid": [q for q, _ in rows], "answer": [a for _, a in rows]}
        counts["n_queries_with_answers"] = len({q for q, _ in rows})
    return tables, counts


def _history(root: Path, keep: list[int]) -> list[list[str]]:
    from components.common.readers import read_parquet

    table = read_parquet(str(root / "queries.parquet"), {"history": "list"}).column("history").to_pylist()
    return [list(table[i] or []) for i in keep]


def with_history(texts: list[str], history: list[list[str]], turns: int) -> list[str]:
    """Each question followed by its last ``turns`` earlier turns (a conversational benchmark's
    question is often elliptic: "When was it built?")."""
    out = []
    for text, past in zip(texts, history):
        recent = [h for h in past[-turns:] if h.strip()]
        out.append(f"{text} (earlier in the conversation: {' | '.join(recent)})" if recent else text)
    return out


def _renumber(ids: list[int], path: Path, column: str) -> dict[int, int]:
    from components.common.readers import DatasetError

    index = {d: i for i, d in enumerate(ids)}
    if len(index) != len(ids):
        raise DatasetError(f"{path}: column {column!r} has duplicate ids")
    return index
