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
from components.tricd.backbones import ANSWER_TOKENS, MAX_TEXT  # noqa: F401  (re-exported)
from components.tricd.model import build_vocab, encode


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
    text: object                  # the backbone's encoding of the questions (row-aligned)
    target: torch.Tensor | None   # (Q,) toy-vocabulary id of the answer (toy backbone training)
    video_idx: torch.Tensor       # (Q,)

    @property
    def tasks(self) -> np.ndarray:
        return self.qa.task.to_numpy()


def load_split(bench_dir, split: str, limit: int | None = None, backbone=None,
               compound: bool = False) -> Split:
    """A split's videos and questions, encoded by ``backbone`` (default: the toy vocabulary,
    with the answers' token ids as training targets; ``compound``: v10 compound colour-shape ids)."""
    from components.common.io import load_torch, read_table

    qa = read_table(f"{bench_dir}/{split}_qa.parquet").to_pandas()
    if limit is not None and len(qa) > limit:   # rows spread evenly: every task is kept
        keep = np.unique(np.linspace(0, len(qa) - 1, limit).round().astype(int))
        qa = qa.iloc[keep].reset_index(drop=True)
    videos = load_torch(f"{bench_dir}/{split}_videos.pt")
    target = None
    if backbone is None:
        index = {w: i for i, w in enumerate(build_vocab(compound))}
        text = torch.tensor([encode(q, index, MAX_TEXT, compound) for q in qa.question], dtype=torch.long)
        target = torch.tensor([index[a] for a in qa.answer], dtype=torch.long)
    else:
        text = backbone.encode(qa)
    return Split(videos, qa, text, target, torch.tensor(qa.video.to_numpy(), dtype=torch.long))


def answer_ids() -> torch.Tensor:
    """Toy-vocabulary ids of the answer tokens."""
    index = {w: i for i, w in enumerate(build_vocab())}
    return torch.tensor([index[w] for w in ANSWER_TOKENS])


def as_backbone(model):
    """A bare ``ToyVLLM`` is wrapped; a backbone adapter passes through."""
    from components.tricd.backbones import ToyBackbone
    from components.tricd.model import ToyVLLM

    return ToyBackbone(model) if isinstance(model, ToyVLLM) else model


@torch.no_grad()
def run_pass(backbone, videos: torch.Tensor, text, weight: torch.Tensor | None = None,
             batch: int | None = None, hidden: bool = False, video_idx=None):
    """One forward pass over (video, question) rows -> (Q, 5) answer logits [and the final
    hidden states (Q, L, d) and their padding mask (Q, L) when ``hidden``]. ``videos`` are
    row-aligned, or indexed by ``video_idx`` (Q,) when given (no row-aligned copy is made)."""
    backbone = as_backbone(backbone)
    batch = batch or backbone.batch
    outs, hs, pads = [], [], []
    for s in range(0, len(text), batch):
        w = None if weight is None else weight[s:s + batch]
        vids = videos[s:s + batch] if video_idx is None else videos[video_idx[s:s + batch]]
        q, h, pad = backbone.forward(vids.float(), text[s:s + batch], w, hidden)
        outs.append(q)
        if hidden:
            hs.append(h)
            pads.append(pad)
    q = torch.cat(outs)
    return (q, torch.cat(hs), torch.cat(pads)) if hidden else q


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
