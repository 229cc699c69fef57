"""Run the frozen lower MiniLM layers once and cache their output for every split.

Fine-tuning only touches the upper layers, so the residual stream after layer
``frozen_layers - 1`` is the same for every run; caching it cuts CPU cost about in half.
Stored as float16 to keep the versioned file small; all runs read the same cache.
"""
from __future__ import annotations

from pathlib import Path

import torch

from components.caft.data import SPLITS
from components.caft.minilm import encode_lower
from components.common.minilm import load_minilm, tokenize
from components.common.io import load_torch, read_table, save_torch


def cache_lower_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:  # no frozen trunk to cache: the SFT rows, length-checked once
        from components.caft.paper import prepare_paper_inputs

        return prepare_paper_inputs(cfg, ctx)
    data_dir = Path(ctx.inputs["build_data"])
    cache, base = {}, load_minilm()
    for i, split in enumerate(SPLITS):
        rows = read_table(data_dir / f"{split}.parquet").to_pydict()
        ids, mask = tokenize(rows["text"], cfg.data.max_len)
        h = encode_lower(ids, mask, upto=cfg.model.frozen_layers - 1, base=base)
        cache[split] = {"h": h.half(), "mask": mask.bool(), "text": rows["text"],
                        "a": torch.tensor(rows["a"]), "b": torch.tensor(rows["b"])}
        if "heldout" in rows:  # the probe split's fit / held-out marks
            cache[split]["heldout"] = torch.tensor(rows["heldout"])
        ctx.progress(i + 1, len(SPLITS), f"cached {split}")
    save_torch(ctx.out_dir / "cache.pt", cache)
    ctx.write_metrics({"n_tokens": int(sum(c["mask"].sum() for c in cache.values()))})


def load_cache(stage_dir) -> dict[str, dict]:
    """{split: {h (float32), mask, text, a, b[, heldout]}} from the cache_lower stage output."""
    cache = load_torch(Path(stage_dir) / "cache.pt")
    for split in cache.values():
        split["h"] = split["h"].float()
    return cache
