"""Weighted kNN classification on embeddings (how label-free soups are scored)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def weighted_knn_predict(bank: torch.Tensor, bank_labels: torch.Tensor, queries: torch.Tensor,
                         k: int = 20, temperature: float = 0.07, num_classes: int = 10) -> torch.Tensor:
    """Each of the k most cosine-similar bank items votes for its label with weight exp(sim / T)."""
    bank, queries = F.normalize(bank, dim=-1), F.normalize(queries, dim=-1)
    sim, idx = (queries @ bank.T).topk(min(k, len(bank)), dim=-1)
    votes = torch.zeros(len(queries), num_classes, dtype=sim.dtype)
    votes.scatter_add_(1, bank_labels[idx], torch.exp(sim / temperature))
    return votes.argmax(-1)


def knn_accuracy(bank, bank_labels, queries, query_labels, **kwargs) -> float:
    return float((weighted_knn_predict(bank, bank_labels, queries, **kwargs) == query_labels).float().mean())
