"""Layered component graph: V0 document summaries, V1 components, V2 subcomponents
(sentences, table rows, image tags); hierarchical edges D->C->sub and navigational edges C->D."""
from __future__ import annotations

import re

import numpy as np

from components.common.io import read_table, write_json_atomic, write_table


def split_subcomponents(kind: str, text: str) -> list[str]:
    """Sentences of a paragraph; rows of a table and tags of an image, each prefixed by the
    caption so a row still says whose row it is (as LILaC keeps the table title)."""
    if kind == "paragraph":
        return [s.strip() + "." for s in text.split(".") if s.strip()]
    head, _, body = text.partition(". ")
    parts = [p.strip() for p in re.split(r"[.,] ", body.rstrip(".")) if p.strip()]
    return [f"{head} | {p}" for p in parts]


def _given_subcomponents(corpus_dir) -> dict[int, list[str]] | None:
    """V2 nodes a parsed benchmark ships (sentences, table segments, visual-object tags), by
    component; None for SynthWiki, whose subcomponents are split from the component text."""
    path = corpus_dir / "subcomponents.parquet"
    if not path.is_file():
        return None
    out: dict[int, list[str]] = {}
    table = read_table(path).to_pydict()
    for c, t in zip(table["comp_id"], table["text"]):
        out.setdefault(int(c), []).append(t)
    return out


def build_graph_stage(cfg, ctx) -> None:
    seed = str(ctx.item["seed"])
    corpus_dir = ctx.inputs["build_corpus"][seed]
    docs = read_table(corpus_dir / "docs.parquet").to_pydict()
    comps = read_table(corpus_dir / "components.parquet").to_pydict()
    subs = _given_subcomponents(corpus_dir)
    layer, doc_id, comp_id, text, image = [], [], [], [], []
    images = comps.get("image", [""] * len(comps["comp_id"]))  # a local benchmark's image files
    for d, summary in zip(docs["doc_id"], docs["summary"]):
        layer.append(0), doc_id.append(d), comp_id.append(-1), text.append(summary), image.append("")
    for c, d, kind, t, img in zip(comps["comp_id"], comps["doc_id"], comps["kind"], comps["text"], images):
        layer.append(1), doc_id.append(d), comp_id.append(c), text.append(t), image.append(img)
        for sub in subs.get(c, []) if subs is not None else split_subcomponents(kind, t):
            layer.append(2), doc_id.append(d), comp_id.append(c), text.append(sub), image.append("")
    nodes = {"layer": layer, "doc_id": doc_id, "comp_id": comp_id, "text": text}
    if "image" in comps:
        nodes["image"] = image
    write_table(ctx.out_dir / "nodes.parquet", nodes)
    src = [c for c, links in zip(comps["comp_id"], comps["links"]) for _ in links]
    dst = [d for links in comps["links"] for d in links]
    write_table(ctx.out_dir / "nav_edges.parquet", {"comp_id": src, "doc_id": dst})
    counts = np.bincount(np.asarray(layer), minlength=3)
    stats = {"n_v0": int(counts[0]), "n_v1": int(counts[1]), "n_v2": int(counts[2]), "n_nav_edges": len(src)}
    write_json_atomic(ctx.out_dir / "stats.json", stats)
    ctx.write_metrics(stats)
