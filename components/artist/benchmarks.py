"""The paper's six time-series QA benchmarks, read from the user's folders in the layout the
official code (github.com/mims-harvard/ARTIST, ``artist/multimodal.py``) reads them.

Layout under ``paper.benchmark_root`` (one folder per benchmark, the official ``cache_path``
names ``data/processed/<folder>``): ``<folder>/{train,val,test}.json`` (or ``.jsonl``), JSON
lines, one question per line:

| benchmark | folder | official task class | series field | label field |
|---|---|---|---|---|
| ETI | ``eti`` | MultimodalMCQTask | ``series`` | ``label`` (option text) |
| RCW | ``rcw`` | TimerbedRCWTask | ``ecg`` | ``label_new`` (option text) |
| ECG-QA | ``ecg_qa`` | TimerbedECGTask | ``ecg`` | ``label_new`` (option text) |
| Sleep-QA | ``sleep_qa`` | MultimodalMCQTask | ``series`` | ``label`` (option text) |
| TSQA | ``tsqa`` | MultimodalMCQTask | ``series`` | ``label``: a letter when ``question_format`` is ``multiple_choice``, else ``True``/``False`` |
| TRQA | ``trqa`` | MultimodalMCQTask | ``series`` | ``label``: a letter when ``question_type`` is ``multiple_choices``, else ``T``/``F`` |

Every line also has ``question`` (text) and ``options`` (list of option texts; empty for a
true/false question, which then gets True/False). As in the official loader, an
``answer_index`` field, when present, gives the answer (except for ETI). A training line may
carry ``cot_in_format`` (the curated SFT conversation, a list of chat messages); the zoom calls
in its assistant turns (``"ts_seg": [start, end]``) become that question's SFT trace.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from components.common.readers import DatasetError, read_jsonl


@dataclass(frozen=True)
class Benchmark:
    name: str
    folder: str
    series: str
    label: str
    rule: str            # how the label maps to an option index: option_text | tsqa | trqa


BENCHMARKS = {b.name: b for b in (
    Benchmark("ETI", "eti", "series", "label", "option_text"),
    Benchmark("RCW", "rcw", "ecg", "label_new", "option_text"),
    Benchmark("ECG-QA", "ecg_qa", "ecg", "label_new", "option_text"),
    Benchmark("Sleep-QA", "sleep_qa", "series", "label", "option_text"),
    Benchmark("TSQA", "tsqa", "series", "label", "tsqa"),
    Benchmark("TRQA", "trqa", "series", "label", "trqa"),
)}
SPLITS = ("train", "val", "test")
LAYOUT = ("a folder holding one sub-folder per benchmark (eti, rcw, ecg_qa, sleep_qa, tsqa, trqa), each "
          "with train/val/test.json or .jsonl (JSON lines: question, options, the series and label fields "
          "of the official ARTIST loaders)")
_SEG = re.compile(r'"ts_seg"\s*:\s*\[\s*(-?\d+)\s*,\s*(-?\d+)\s*\]')


def split_file(root: str | Path, name: str, split: str) -> Path:
    """``<root>/<folder>/<split>.json`` or ``.jsonl``; raises FileNotFoundError naming both."""
    b = BENCHMARKS[name]
    for ext in (".json", ".jsonl"):
        path = Path(root).expanduser() / b.folder / f"{split}{ext}"
        if path.is_file():
            return path
    raise FileNotFoundError(f"{Path(root) / b.folder}/{split}.json(l) not found")


def answer_index(b: Benchmark, row: dict, options: list[str]) -> int:
    if "answer_index" in row and b.name != "ETI":
        return int(row["answer_index"])
    label = row[b.label]
    if b.rule == "tsqa":
        return ("ABCDEFGHIJK".index(label) if row.get("question_format") == "multiple_choice"
                else ["True", "False"].index(label))
    if b.rule == "trqa":
        return "ABCD".index(label) if row.get("question_type") == "multiple_choices" else ["T", "F"].index(label)
    return options.index(label)


def cot_windows(cot) -> list[list[int]]:
    """The zoom windows of a curated SFT conversation, in order."""
    if not cot:
        return []
    turns = cot if isinstance(cot, list) else [{"content": str(cot)}]
    out = []
    for m in turns:
        if isinstance(m, dict) and m.get("role", "assistant") == "assistant":
            out += [[int(a), int(b)] for a, b in _SEG.findall(str(m.get("content", "")))]
    return out


def to_item(b: Benchmark, row: dict, where: str) -> dict:
    """One question in the pipeline's table format (see ``lm.Question``)."""
    for field in ("question", b.series, b.label):
        if field not in row and not (field == b.label and "answer_index" in row):
            raise DatasetError(f"{where}: missing field {field!r}")
    series = [float(v) for v in row[b.series]]
    options = [str(o) for o in (row.get("options") or [])]
    try:
        idx = answer_index(b, row, options)
    except (ValueError, KeyError) as err:
        raise DatasetError(f"{where}: label {row.get(b.label)!r} is not one of its options ({err})") from None
    if not options:          # true/false questions come without option texts
        options = ["True", "False"]
    if not 0 <= idx < len(options):
        raise DatasetError(f"{where}: answer index {idx} outside its {len(options)} options")
    if len(series) < 2:
        raise DatasetError(f"{where}: field {b.series!r} must hold a series of numbers")
    return {"family": b.name, "question": str(row["question"]), "options": options, "answer": idx,
            "n_options": len(options), "series": series, "length": len(series), "evidence": [], "decoys": [],
            "cot_windows": cot_windows(row.get("cot_in_format"))}


def read_split(root: str | Path, name: str, split: str, limit: int = 0) -> list[dict]:
    path = split_file(root, name, split)
    rows = read_jsonl(str(path), limit=limit or None)
    return [to_item(BENCHMARKS[name], r, f"{path}:{i + 1}") for i, r in enumerate(rows)]


def check_root(root: str | Path, names: list[str]) -> str:
    """'' when every benchmark has its three split files and a readable first line, else the
    problem in a few words (preflight turns it into one line naming ``paper.benchmark_root``)."""
    for name in names:
        if name not in BENCHMARKS:
            return f"names an unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})"
        for split in SPLITS:
            try:
                path = split_file(root, name, split)
                rows = read_jsonl(str(path), limit=1)
                if not rows:
                    return f"has an empty {path}"
                to_item(BENCHMARKS[name], rows[0], f"{path}:1")
            except (FileNotFoundError, DatasetError) as err:
                return f"is missing or malformed ({err})"
    return ""


def benchmark_tasks_stage(cfg, ctx) -> None:
    """generate_tasks of the paper profile: every benchmark's splits as one table per split (the
    pipeline's columns; ``family`` = the benchmark's name)."""
    from components.common.io import write_json_atomic, write_table

    p = cfg.paper
    limits = {"train": p.max_train, "val": p.max_val, "test": p.max_test}
    summary, counts = {}, {}
    for i, split in enumerate(SPLITS):
        items = []
        for name in p.benchmarks:
            part = read_split(p.benchmark_root, name, split, limits[split])
            counts[f"{name}_{split}"] = len(part)
            items += part
        cols = {k: [it[k] for it in items] for k in items[0]}
        write_table(ctx.out_dir / f"{split}.parquet", cols)
        summary[f"n_{split}"] = len(items)
        ctx.progress(i + 1, len(SPLITS), f"{split}: {len(items)} questions")
    write_json_atomic(ctx.out_dir / "families.json",
                      {name: {"folder": BENCHMARKS[name].folder} for name in p.benchmarks})
    ctx.write_metrics({**summary, **counts})
