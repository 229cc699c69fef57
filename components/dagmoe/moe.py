"""Sparse MoE feed-forward layers: a top-K router, vectorised expert dispatch, and three ways to
turn the K selected expert outputs into one vector per token:

- ``SumAggregation``: the standard gate-weighted sum (optionally plus an always-on shared expert).
- ``DagAggregation``: DAG-MoE. The K gated outputs (each plus h/K, a K-th of the residual
  stream) are nodes of a small graph; L rounds of gated pairwise messages refine them, then they
  are summed. Each round's output projection starts at zero.

Every aggregation owns the residual path of its block: it is called with the normalised input
``x = LN(h)`` and the stream ``h`` and returns the new stream. The DAG's injected token *is* the
residual (the K shares sum to one copy of h), so no second copy is added; at initialisation a
DAG-MoE layer therefore computes exactly h + sum_k g_k E_k(x), the plain MoE layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from components.common.transformer import MLP


@dataclass(frozen=True)
class MoEShape:
    d_model: int = 96
    n_experts: int = 8
    d_expert: int = 192
    top_k: int = 2
    renormalize_topk: bool = False  # Switch style: gates are the full-softmax probabilities


class Router(nn.Module):
    """Token-choice softmax router. Returns the top-K gates (descending), their expert ids,
    and the auxiliary losses (Switch load balance and router z-loss)."""

    def __init__(self, shape: MoEShape):
        super().__init__()
        self.shape = shape
        self.proj = nn.Linear(shape.d_model, shape.n_experts, bias=False)

    def forward(self, x: torch.Tensor):
        logits = self.proj(x)                                   # (T, N)
        probs = logits.softmax(dim=-1)
        gates, experts = probs.topk(self.shape.top_k, dim=-1)  # sorted: node order = router order
        if self.shape.renormalize_topk:
            gates = gates / gates.sum(dim=-1, keepdim=True)
        aux = {"load_balance": load_balance_loss(probs, experts, self.shape.n_experts),
               "z_loss": torch.logsumexp(logits, dim=-1).pow(2).mean()}
        return gates, experts, probs, aux


def load_balance_loss(probs: torch.Tensor, experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Switch normalisation N * sum_i f_i P_i: f_i = share of the T*K assignments sent to expert i,
    P_i = mean router probability of i. Equals 1.0 for perfectly uniform routing."""
    counts = torch.bincount(experts.reshape(-1), minlength=n_experts).to(probs.dtype)
    fraction = counts / experts.numel()
    return n_experts * (fraction * probs.mean(dim=0)).sum()


class Experts(nn.Module):
    """N bias-free GELU MLPs stored as stacked weights, evaluated with sort-by-expert dispatch."""

    def __init__(self, shape: MoEShape):
        super().__init__()
        self.shape = shape
        self.w_in = nn.Parameter(torch.empty(shape.n_experts, shape.d_model, shape.d_expert))
        self.w_out = nn.Parameter(torch.empty(shape.n_experts, shape.d_expert, shape.d_model))
        self.reset_special_parameters()

    def reset_special_parameters(self) -> None:
        nn.init.normal_(self.w_in, std=0.02)
        nn.init.normal_(self.w_out, std=0.02)

    def forward(self, x: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """``x`` (T, d), ``experts`` (T, K) ids -> ungated outputs (T, K, d), one per selection.

        Every (token, slot) assignment is sorted by expert id so each expert runs one matmul
        over its contiguous block; the loop is over experts (N), never over tokens."""
        t, k = experts.shape
        flat = experts.reshape(-1)                        # (T*K,)
        order = flat.argsort(stable=True)
        token_of = order // k                             # which token each sorted assignment is
        counts = torch.bincount(flat, minlength=self.shape.n_experts).tolist()
        inputs = x[token_of].split(counts)
        outs = [F.gelu(xi @ self.w_in[e]) @ self.w_out[e] if len(xi) else xi
                for e, xi in enumerate(inputs)]
        sorted_out = torch.cat(outs)                      # (T*K, d) in sorted order
        out = torch.empty_like(sorted_out).index_copy_(0, order, sorted_out)
        return out.view(t, k, -1)


class SumAggregation(nn.Module):
    """h + sum_k g_k E_k(x) (+ shared(x) when the baseline gets a shared expert)."""

    def __init__(self, d_model: int, d_shared: int = 0):
        super().__init__()
        self.shared = MLP(d_model, d_shared) if d_shared > 0 else None

    def forward(self, x, gates, expert_out, residual):
        y = residual + (gates.unsqueeze(-1) * expert_out).sum(dim=1)
        return y + self.shared(x) if self.shared is not None else y


class DagRound(nn.Module):
    """One round of gated messages from the K nodes of the previous layer to K new nodes.

    Each pair (i, j) is described by f_ij = [d_i, d_j], d = W_down LN(node). The edge gate
    e_ij = sigmoid(W_edge f_ij) (a scalar or a d_g-vector) scales the message W_node f_ij;
    node i receives sum_j of them, projected back up by W_up (zero at init) as a residual update.
    """

    def __init__(self, d_model: int, d_graph: int, vector_gate: bool = False):
        super().__init__()
        self.d_graph = d_graph
        self.norm = nn.LayerNorm(d_model)
        self.down = nn.Linear(d_model, d_graph, bias=False)
        self.node = nn.Linear(2 * d_graph, d_graph, bias=False)
        self.edge = nn.Linear(2 * d_graph, d_graph if vector_gate else 1, bias=False)
        self.up = nn.Linear(d_graph, d_model, bias=False)
        self.reset_special_parameters()
        self.last_edge_gates: torch.Tensor | None = None  # (T, K, K, g) kept for analysis

    def reset_special_parameters(self) -> None:
        nn.init.zeros_(self.up.weight)  # identity at init; the note reports divergence otherwise

    def forward(self, nodes: torch.Tensor) -> torch.Tensor:
        d = self.down(self.norm(nodes))                           # (T, K, d_g)
        # A linear map of [d_i, d_j] is A d_i + B d_j: compute both halves once per node and
        # broadcast over pairs instead of materialising the (T, K, K, 2 d_g) concatenation.
        g = self.d_graph
        node_i, node_j = F.linear(d, self.node.weight[:, :g]), F.linear(d, self.node.weight[:, g:])
        edge_i, edge_j = F.linear(d, self.edge.weight[:, :g]), F.linear(d, self.edge.weight[:, g:])
        gate = torch.sigmoid(edge_i.unsqueeze(2) + edge_j.unsqueeze(1))        # (T, K, K, 1|d_g)
        message = gate * (node_i.unsqueeze(2) + node_j.unsqueeze(1))           # (T, K, K, d_g)
        if not self.training:
            self.last_edge_gates = gate.detach()
        return nodes + self.up(message.sum(dim=2))


class DagAggregation(nn.Module):
    """DAG-MoE aggregation over the K selected experts, in router (descending gate) order."""

    def __init__(self, d_model: int, top_k: int, d_graph: int, rounds: int,
                 vector_gate: bool = False):
        super().__init__()
        self.top_k = top_k
        self.rounds = nn.ModuleList(DagRound(d_model, d_graph, vector_gate) for _ in range(rounds))

    def forward(self, x, gates, expert_out, residual):
        """``residual`` is the un-normalised stream h: each layer-0 node carries h/K, so the
        injected token sums to exactly the one residual copy the block needs (a second copy on
        top -- injecting LN(h)/K and adding h -- grows the stream by one unit RMS per layer)."""
        nodes = gates.unsqueeze(-1) * expert_out + residual.unsqueeze(1) / self.top_k
        for dag_round in self.rounds:
            nodes = dag_round(nodes)
        return nodes.sum(dim=1)


class MoELayer(nn.Module):
    """Router + experts + an aggregation module; a drop-in feed-forward slot for the decoder.
    After each forward pass ``self.aux`` holds the router's auxiliary losses and ``self.stats``
    the (detached) routing probabilities and choices for analysis."""

    def __init__(self, shape: MoEShape, aggregation: nn.Module):
        super().__init__()
        self.shape = shape
        self.router = Router(shape)
        self.experts = Experts(shape)
        self.aggregation = aggregation
        self.aux: dict[str, torch.Tensor] = {}
        self.stats: dict[str, torch.Tensor] = {}

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``x`` = LN(h) feeds the router and experts; ``residual`` = h; returns the new stream."""
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1])
        residual = residual.reshape(-1, residual.shape[-1])
        gates, experts, probs, self.aux = self.router(flat)
        y = self.aggregation(flat, gates, self.experts(flat, experts), residual=residual)
        if not self.training:
            self.stats = {"experts": experts.detach(), "probs": probs.detach()}
        return y.view(*lead, -1)


def dag_parameter_count(d_model: int, d_graph: int, rounds: int, vector_gate: bool = False) -> int:
    """Closed form: per round d*d_g (down) + 2 d_g^2 (node) + 2 d_g g (edge) + d_g d (up) + 2d (LN)."""
    g = d_graph if vector_gate else 1
    per_round = (d_model * d_graph + 2 * d_graph * d_graph + 2 * d_graph * g
                 + d_graph * d_model + 2 * d_model)
    return rounds * per_round


def matched_shared_width(d_model: int, d_graph: int, rounds: int, vector_gate: bool = False) -> int:
    """Hidden width of a bias-free 2-matrix shared expert with as many parameters as the DAG."""
    return max(1, round(dag_parameter_count(d_model, d_graph, rounds, vector_gate) / (2 * d_model)))


def binary_entropy(p: torch.Tensor) -> torch.Tensor:
    p = p.clamp(1e-7, 1 - 1e-7)
    return -(p * p.log() + (1 - p) * (1 - p).log()) / math.log(2)
