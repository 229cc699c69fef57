"""Triple-pathway calibrated decoding and the passes it needs, plus the scoring of predictions.

q = q_o + a1 (q_p - q_o) + a2 (q_o - q_n)      (official code: a1 = a2 = 1 -> q_p + q_o - q_n)
computed on the raw logits of the allowed answer tokens ({yes, no} or {A, B, C}); no plausibility
cut-off (the official code has none). When the router selects no tool the negative video is the
original, so q_n = q_o and the negative term vanishes (explicit, not an accident).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from components.tricd import benchmark as B
from components.tricd.model import build_vocab, encode, trim

ANSWER_TOKENS = ("yes", "no", "A", "B", "C")
MAX_TEXT = 40


def calibrate(q_o, q_p, q_n, a1: float = 1.0, a2: float = 1.0):
    return q_o + a1 * (q_p - q_o) + a2 * (q_o - q_n)


def allowed_mask(tasks) -> np.ndarray:
    """(Q, 5) bool: yes/no for YN items, A/B/C for MC items."""
    yn = np.array([t.endswith("yn") for t in tasks])
    return np.stack([yn, yn, ~yn, ~yn, ~yn], axis=1)


def predict(q: np.ndarray, tasks) -> np.ndarray:
    """Constrained argmax -> answer strings."""
    q = np.where(allowed_mask(tasks), np.asarray(q, dtype=np.float64), -np.inf)
    return np.array(ANSWER_TOKENS)[q.argmax(axis=1)]


@dataclass
class Split:
    videos: torch.Tensor          # (N, T, H, W, 3) uint8
    qa: pd.DataFrame
    text: torch.Tensor            # (Q, MAX_TEXT) token ids
    target: torch.Tensor          # (Q,) vocab id of the answer
    video_idx: torch.Tensor       # (Q,)

    @property
    def tasks(self) -> np.ndarray:
        return self.qa.task.to_numpy()


def load_split(bench_dir, split: str, limit: int | None = None) -> Split:
    from components.common.io import load_torch, read_table

    vocab = build_vocab()
    index = {w: i for i, w in enumerate(vocab)}
    qa = read_table(f"{bench_dir}/{split}_qa.parquet").to_pandas()
    if limit is not None and len(qa) > limit:
        qa = qa.iloc[:limit].reset_index(drop=True)
    videos = load_torch(f"{bench_dir}/{split}_videos.pt")
    text = torch.tensor([encode(q, index, MAX_TEXT) for q in qa.question], dtype=torch.long)
    target = torch.tensor([index[a] for a in qa.answer], dtype=torch.long)
    return Split(videos, qa, text, target, torch.tensor(qa.video.to_numpy(), dtype=torch.long))


def answer_ids() -> torch.Tensor:
    index = {w: i for i, w in enumerate(build_vocab())}
    return torch.tensor([index[w] for w in ANSWER_TOKENS])


@torch.no_grad()
def run_pass(model, videos: torch.Tensor, text: torch.Tensor, weight: torch.Tensor | None = None,
             batch: int = 256, hidden: bool = False):
    """One forward pass over aligned (video, question) rows -> (Q, 5) answer logits
    [and the final hidden states (Q, L, d) when ``hidden``]."""
    ids = answer_ids()
    outs, hs = [], []
    for s in range(0, len(text), batch):
        w = None if weight is None else weight[s:s + batch]
        chunk = text[s:s + batch]
        logits, h = model(videos[s:s + batch], chunk if hidden else trim(chunk), w)
        outs.append(logits[:, ids])
        if hidden:
            hs.append(h)
    q = torch.cat(outs)
    return (q, torch.cat(hs)) if hidden else q


def score(qa: pd.DataFrame, pred) -> dict[str, float]:
    """Accuracy per task, macro average over the four tasks, per evidence type, isolated vs
    compositional (a compositional item counts for each of its types)."""
    correct = np.asarray(pred) == qa.answer.to_numpy()
    out: dict[str, float] = {}
    for task in B.TASKS:
        mask = (qa.task == task).to_numpy()
        out[f"acc_{task}"] = float(correct[mask].mean()) if mask.any() else float("nan")
    out["macro"] = float(np.nanmean([out[f"acc_{t}"] for t in B.TASKS]))
    comp = qa.compositional.to_numpy().astype(bool)
    out["isolated"] = float(correct[~comp].mean()) if (~comp).any() else float("nan")
    out["compositional"] = float(correct[comp].mean()) if comp.any() else float("nan")
    for kind in B.TYPES:
        has = np.array([kind in list(t) for t in qa.types])
        out[f"type_{kind}"] = float(correct[has].mean()) if has.any() else float("nan")
    return out
