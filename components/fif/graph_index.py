"""In-memory view of one corpus: the layered graph plus its embeddings, and the
multi-granularity vector score Score_vec(q, v; g) = max over v's descendants at layer g."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.common.io import load_torch, read_table
from components.fif.reader import Candidate


@dataclass
class GraphIndex:
    titles: list[str]
    summaries: list[str]
    comp_doc: np.ndarray
    comp_text: list[str]
    comp_links: list[list[int]]
    e_doc: np.ndarray      # V0 summary embeddings, by doc id
    e_comp: np.ndarray     # V1, by comp id
    e_sub: np.ndarray      # V2
    sub_comp: np.ndarray   # parent component of each V2 node

    def __post_init__(self) -> None:
        n_docs = len(self.titles)
        self.doc_comps = [[] for _ in range(n_docs)]
        for c, d in enumerate(self.comp_doc):
            self.doc_comps[int(d)].append(c)
        self.neighbours = [set() for _ in range(n_docs)]
        for c, links in enumerate(self.comp_links):
            self.neighbours[int(self.comp_doc[c])].update(int(d) for d in links)
        self.has_sub = np.zeros(len(self.comp_text), bool)
        self.has_sub[self.sub_comp] = True

    @classmethod
    def load(cls, corpus_dir, graph_dir, embed_dir) -> "GraphIndex":
        docs = read_table(corpus_dir / "docs.parquet").to_pydict()
        comps = read_table(corpus_dir / "components.parquet").to_pydict()
        nodes = read_table(graph_dir / "nodes.parquet").to_pydict()
        emb = load_torch(embed_dir / "emb.pt").numpy()
        layer = np.asarray(nodes["layer"])
        comp_id = np.asarray(nodes["comp_id"])
        # nodes are written V0 in doc order, then each component followed by its subcomponents
        e_comp = np.zeros((len(comps["comp_id"]), emb.shape[1]), np.float32)
        e_comp[comp_id[layer == 1]] = emb[layer == 1]
        return cls(docs["title"], docs["summary"], np.asarray(comps["doc_id"]), comps["text"],
                   [list(x) for x in comps["links"]], emb[layer == 0], e_comp, emb[layer == 2],
                   comp_id[layer == 2])

    def comp_scores(self, qv: np.ndarray, g: int) -> np.ndarray:
        s1 = self.e_comp @ qv
        if g == 1:
            return s1
        s2 = np.full(len(s1), -np.inf, np.float32)
        np.maximum.at(s2, self.sub_comp, self.e_sub @ qv)
        return np.where(self.has_sub, s2, s1)

    def doc_scores(self, qv: np.ndarray, g: int) -> np.ndarray:
        if g == 0:
            return self.e_doc @ qv
        s = np.full(len(self.titles), -np.inf, np.float32)
        np.maximum.at(s, self.comp_doc, self.comp_scores(qv, g))
        return s

    def candidate(self, c: int) -> Candidate:
        """What a reader may see of a component: its text and its link anchor titles."""
        return Candidate(self.comp_text[c], [self.titles[d] for d in self.comp_links[c]])
