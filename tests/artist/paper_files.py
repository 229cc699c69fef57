"""Tiny benchmark folders in the official ARTIST layout (``<root>/<folder>/{train,val,test}.json``,
JSON lines), for the paper-profile tests: ETI rows (``series``/``label`` = option text, with a
curated ``cot_in_format`` conversation on training rows) and RCW rows (``ecg``/``label_new``)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ETI_OPTIONS = ["spike", "level shift", "trend change", "variance burst"]
RCW_OPTIONS = ["no right whale call", "a right whale call"]


def eti_row(rng: np.random.Generator, train: bool) -> dict:
    n = int(rng.integers(40, 80))
    label = ETI_OPTIONS[int(rng.integers(4))]
    row = {"series": rng.normal(size=n).round(3).tolist(), "question": "Which cause explains the anomaly?",
           "options": ETI_OPTIONS, "label": label}
    if train:
        a = int(rng.integers(0, n // 2))
        row["cot_in_format"] = [
            {"role": "assistant", "content": '<think>look</think><tool_call>{"name": "timeseries_zoom_in_tool", '
                                             f'"arguments": {{"ts_seg": [{a}, {a + 10}]}}}}</tool_call>'},
            {"role": "assistant", "content": f"<think>seen</think><answer>{label}</answer>"}]
    return row


def rcw_row(rng: np.random.Generator) -> dict:
    return {"ecg": rng.normal(size=100).round(3).tolist(), "question": "Does the clip hold a right whale call?",
            "options": RCW_OPTIONS, "label_new": RCW_OPTIONS[int(rng.integers(2))], "record": "r1"}


def write_benchmarks(root: Path, n: int = 8, seed: int = 0) -> Path:
    """``root/eti`` and ``root/rcw``, ``n`` questions per split file."""
    rng = np.random.default_rng(seed)
    for folder, make in (("eti", lambda split: eti_row(rng, split == "train")), ("rcw", lambda split: rcw_row(rng))):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for split in ("train", "val", "test"):
            lines = [json.dumps(make(split)) for _ in range(n)]
            (root / folder / f"{split}.json").write_text("\n".join(lines) + "\n")
    return root
