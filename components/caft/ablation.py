"""CAFT's intervention: remove a fixed subspace from the residual stream during training.

For a layer with directions V (k x d), Q is an orthonormal basis of span(V) (QR), and every
token's residual vector h becomes h - (h Q) Q^T, i.e. its component inside span(V) is set to
zero. The projection is not trainable. Hooks are attached only while fine-tuning; the model is
evaluated and deployed without them.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from components.caft.minilm import UpperClassifier


def orthonormal_basis(directions: torch.Tensor) -> torch.Tensor:
    """d x k matrix with orthonormal columns spanning the rows of ``directions`` (k x d).
    Non-orthonormal inputs (e.g. SAE decoder rows, random vectors) would make h - h V V^T wrong."""
    if directions.numel() == 0:
        return directions.new_zeros(directions.shape[-1], 0)
    q, _ = torch.linalg.qr(directions.T.double())
    return q.to(directions.dtype)


def project_out(h: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Zero-ablate span(Q) at every position: h - (h Q) Q^T."""
    if q.shape[1] == 0:
        return h
    return h - (h @ q) @ q.T


def _output_hook(q: torch.Tensor):
    def hook(_module, _inputs, output):
        if isinstance(output, tuple):  # decoder layers of some transformers versions
            return (project_out(output[0], q.to(output[0])), *output[1:])
        return project_out(output, q.to(output))

    return hook


def _input_hook(q: torch.Tensor):
    def hook(_module, args):
        return (project_out(args[0], q), *args[1:])

    return hook


@contextmanager
def ablation_hooks(model: UpperClassifier, bases: dict[int, torch.Tensor]) -> Iterator[list]:
    """Attach projection hooks on the residual stream after the given MiniLM layers.

    A basis for the layer just below the trainable blocks (``model.first - 1``, the cached
    frozen output) is a forward pre-hook on the first trainable block; the others are forward
    hooks on block outputs. Everything is removed on exit, even after an exception, so
    evaluation always sees the plain model.
    """
    handles = []
    try:
        for layer, q in bases.items():
            if layer == model.first - 1:
                handles.append(model.blocks[0].register_forward_pre_hook(_input_hook(q)))
            elif layer in model.layer_ids:
                block = model.blocks[model.layer_ids.index(layer)]
                handles.append(block.register_forward_hook(_output_hook(q)))
            else:
                raise ValueError(f"layer {layer} is not hookable (trainable layers {model.layer_ids})")
        yield handles
    finally:
        for handle in handles:
            handle.remove()


def has_hooks(model: UpperClassifier) -> bool:
    return any(b._forward_hooks or b._forward_pre_hooks for b in model.blocks)


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder blocks of a transformers causal LM (also under a peft wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder().layers


@contextmanager
def decoder_ablation_hooks(model: torch.nn.Module, bases: dict[int, torch.Tensor]) -> Iterator[list]:
    """The paper-profile form of ``ablation_hooks``: project span(Q) out of the residual stream
    after decoder layer ``l`` of a transformers LM (the stream Gemma Scope's resid-post SAEs
    read), at every position; removed on exit."""
    layers = decoder_layers(model)
    handles = []
    try:
        for layer, q in bases.items():
            if not 0 <= layer < len(layers):
                raise ValueError(f"layer {layer} is not a decoder layer (the model has {len(layers)})")
            handles.append(layers[layer].register_forward_hook(_output_hook(q)))
        yield handles
    finally:
        for handle in handles:
            handle.remove()


def decoder_has_hooks(model: torch.nn.Module) -> bool:
    return any(layer._forward_hooks for layer in decoder_layers(model))


@torch.no_grad()
def decoder_outputs(model: torch.nn.Module, input_ids: torch.Tensor, layers) -> dict[int, torch.Tensor]:
    """{layer: the residual stream after decoder layer ``layer``} for one forward pass, as the
    next layer reads it (after any ablation hook registered before)."""
    seen, blocks = {}, decoder_layers(model)
    probes = [blocks[l].register_forward_hook(
        lambda _m, _i, out, l=l: seen.__setitem__(l, out[0] if isinstance(out, tuple) else out)) for l in layers]
    try:
        model(input_ids=input_ids.to(next(model.parameters()).device))
    finally:
        for h in probes:
            h.remove()
    return seen
