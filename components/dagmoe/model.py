"""The three language models compared here: one decoder, three feed-forward slots.

- ``moe``: top-K MoE with the standard gate-weighted sum.
- ``moe_shared``: the same plus an always-on shared expert sized to the DAG module's parameter
  count (the parameter-matched baseline; the paper's point is structure, not parameters).
- ``dag_moe``: the same router and experts, aggregated by the DAG module.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from components.common.seeds import seed_everything
from components.common.transformer import Decoder, DecoderShape, count_parameters, lm_loss
from components.dagmoe.moe import (DagAggregation, MoELayer, MoEShape, SumAggregation,
                                   matched_shared_width)

VARIANTS = ("moe", "moe_shared", "dag_moe")


def moe_shape(m) -> MoEShape:
    return MoEShape(d_model=m.d_model, n_experts=m.n_experts, d_expert=m.d_expert,
                    top_k=m.top_k, renormalize_topk=m.renormalize_topk)


def make_aggregation(variant: str, m) -> nn.Module:
    if variant == "moe":
        return SumAggregation(m.d_model)
    if variant == "moe_shared":
        return SumAggregation(m.d_model, matched_shared_width(
            m.d_model, m.d_graph, m.dag_rounds, m.vector_gate))
    if variant == "dag_moe":
        return DagAggregation(m.d_model, m.top_k, m.d_graph, m.dag_rounds, m.vector_gate)
    raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")


def build_model(variant: str, m, vocab_size: int) -> Decoder:
    """``m`` is the ``model`` config section (or anything with the same attributes)."""
    shape = DecoderShape(vocab_size=vocab_size, d_model=m.d_model, n_layers=m.n_layers,
                         n_heads=m.n_heads, context=m.context)
    # Every variant's MoE layer owns its block's residual path (called as ffn(ln h, residual=h)),
    # so the three models share one block and differ only in the aggregation.
    return Decoder(shape, lambda _: MoELayer(moe_shape(m), make_aggregation(variant, m)),
                   ffn_residual=False)


def init_model(variant: str, m, vocab_size: int, seed: int, common_init: bool = True) -> Decoder:
    """The model a training run of ``variant`` starts from with ``seed``.

    With ``common_init`` (common random numbers across the arms of a seed), every parameter the
    variant shares with the plain MoE -- embeddings, attention, norms, routers, experts -- takes
    the value the plain MoE gets with this seed, so the arms of one seed start from the same
    network and differ only in what the variant adds (the shared expert, the DAG rounds, drawn
    from the variant's own seeded stream). DAG-MoE then starts as exactly the plain MoE of its
    seed. Without it each variant draws all its parameters from its own stream (the first
    versions did this; the arms of a seed then share only the data order)."""
    seed_everything(seed)
    model = build_model(variant, m, vocab_size)
    if common_init and variant != "moe":
        seed_everything(seed)
        common = build_model("moe", m, vocab_size).state_dict()
        result = model.load_state_dict(common, strict=False)
        if result.unexpected_keys:
            raise ValueError(f"{variant} lacks plain-MoE parameters {result.unexpected_keys}")
        seed_everything(seed)  # the run's other draws do not depend on how it was initialised
    return model


def moe_layers(model: nn.Module) -> list[MoELayer]:
    return [mod for mod in model.modules() if isinstance(mod, MoELayer)]


def training_loss(model: nn.Module, batch, load_balance_coef: float, z_loss_coef: float):
    """Next-token cross-entropy plus the routers' load-balance and z-losses."""
    x, y = batch
    loss = lm_loss(model(x), y)
    for layer in moe_layers(model):
        loss = loss + load_balance_coef * layer.aux["load_balance"] + z_loss_coef * layer.aux["z_loss"]
    return loss


def parameter_report(m, vocab_size: int) -> dict[str, int]:
    """Total trainable parameters of every variant, counted on models built on the meta device
    (shapes only: no memory, no random numbers, cheap at the paper's sizes too)."""
    with torch.device("meta"):
        return {v: count_parameters(build_model(v, m, vocab_size)) for v in VARIANTS}


def check_parameter_match(m, vocab_size: int, tolerance: float) -> dict[str, Any]:
    """Raise unless DAG-MoE and the shared-expert baseline have the same size within tolerance."""
    counts = parameter_report(m, vocab_size)
    gap = abs(counts["dag_moe"] - counts["moe_shared"]) / counts["moe_shared"]
    if gap > tolerance:
        raise ValueError(f"parameter mismatch {gap:.2%} > {tolerance:.0%}: {counts}")
    return {"params": counts, "param_gap": gap}


@torch.no_grad()
def mean_loss(model: nn.Module, windows: torch.Tensor, batch_size: int) -> float:
    """Mean next-token cross-entropy (nats/token) over ``windows`` (n, context+1)."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(windows), batch_size):
        chunk = windows[start:start + batch_size].to(device)
        total += lm_loss(model(chunk[:, :-1]), chunk[:, 1:]).item() * chunk[:, 1:].numel()
        count += chunk[:, 1:].numel()
    return total / max(count, 1)
