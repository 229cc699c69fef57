"""Souping the fine-tuned ingredients: uniform soup, greedy soup (validation-ordered), and the two
premise measurements, both on validation data: pairwise weight distances (do the ingredients
differ?) and midpoint loss barriers (do they share a basin?)."""
from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from components.common.io import load_torch, read_json, save_torch, write_json_atomic
from components.common.soups import greedy_soup, interpolate, uniform_soup
from components.selfsoup.data import load_splits, member_dir
from components.selfsoup.ssl import build_encoder, device, start, stock_arch
from components.selfsoup.vit import Classifier, predict_logits


def classifier(cfg, image_size: int, state: dict, arch: dict | None = None) -> Classifier:
    """A classifier of the stock's architecture holding ``state``; later states are loaded into
    the same module (``evaluate_state``) rather than building a ViT-B per evaluation."""
    model = Classifier(build_encoder(cfg.model, image_size, arch), cfg.model.num_classes)
    model.load_state_dict(state)
    return model.to(device(cfg.model))


def evaluate_model(model, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    logits = predict_logits(model, x)
    return {"acc": float((logits.argmax(-1) == y).float().mean()), "nll": float(F.cross_entropy(logits, y))}


def evaluate_state(net: Classifier, state: dict, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    net.load_state_dict(state)
    return evaluate_model(net, x, y)


def midpoint_barrier(net: Classifier, a: dict, b: dict, x: torch.Tensor, y: torch.Tensor) -> float:
    """Loss at the midpoint of the segment minus the mean loss of its endpoints (nats)."""
    ends = [evaluate_state(net, s, x, y)["nll"] for s in (a, b)]
    return evaluate_state(net, interpolate(a, b, 0.5), x, y)["nll"] - sum(ends) / 2


def weight_distance(a: dict, b: dict) -> float:
    """L2 distance between two state dicts over their floating-point entries."""
    return float(sum((a[k].double() - b[k].double()).pow(2).sum() for k in a if a[k].is_floating_point()) ** 0.5)


def weight_norm(state: dict) -> float:
    return weight_distance(state, {k: torch.zeros_like(v) for k, v in state.items()})


def encoder_part(state: dict) -> dict:
    """The encoder entries of a classifier's state dict (the head left out)."""
    return {k: v for k, v in state.items() if k.startswith("encoder.")}


def start_state(stock_dir) -> dict:
    """Where every fine-tune of a seed starts from in parameter space: stock encoder + probe head."""
    encoder = {f"encoder.{k}": v for k, v in load_torch(stock_dir / "encoder.pt").items()}
    return encoder | {f"head.{k}": v for k, v in load_torch(stock_dir / "head_init.pt").items()}


def pairwise(names: list[str], states: list[dict], measure) -> dict[str, float]:
    return {f"{names[i]}__{names[j]}": measure(states[i], states[j])
            for i, j in itertools.combinations(range(len(names)), 2)}


def soup_stage(cfg, ctx) -> None:
    seed = ctx.item["seed"]
    start(seed)
    splits = load_splits(ctx.inputs["prepare_data"])
    val = splits["val"]
    names = list(cfg.inter_train.ingredients)
    dirs = [member_dir(ctx.inputs["fine_tune"], seed, n) for n in names]
    states = [load_torch(d / "model.pt") for d in dirs]
    val_scores = [read_json(d / "val.json")["val_acc"] for d in dirs]
    stock_dir = ctx.inputs["pretrain_stock"][str(seed)]
    net = classifier(cfg, val["x"].shape[-1], states[0], stock_arch(stock_dir))

    soups = {"uniform_soup": uniform_soup(states)}
    soups["greedy_soup"], kept = greedy_soup(states, val_scores,
                                             lambda s: evaluate_state(net, s, val["x"], val["y"])["acc"])
    for soup_name, state in soups.items():
        save_torch(ctx.out_dir / f"{soup_name}.pt", state)

    # premise measurements: validation data and weights only, never test
    barriers = pairwise(names, states, lambda a, b: midpoint_barrier(net, a, b, val["x"], val["y"]))
    scale = weight_norm(start_state(stock_dir))
    distances = pairwise(names, states, lambda a, b: weight_distance(a, b) / scale)
    # the encoders alone (v5): with LP-FT every model has its own probe head, so the whole-model
    # distance also counts how far apart the heads are
    encoder_distances = pairwise(names, [encoder_part(s) for s in states], lambda a, b: weight_distance(a, b) / scale)
    summary = {"greedy_kept": [names[i] for i in kept], "barriers": barriers, "distances": distances,
               "encoder_distances": encoder_distances}
    write_json_atomic(ctx.out_dir / "soup.json", summary)
    metrics = {f"{k}_val_acc": evaluate_state(net, s, val["x"], val["y"])["acc"] for k, s in soups.items()}
    if barriers:
        metrics |= {"barrier_mean": sum(barriers.values()) / len(barriers), "barrier_max": max(barriers.values()),
                    "distance_min": min(distances.values()), "distance_mean": sum(distances.values()) / len(distances),
                    "encoder_distance_min": min(encoder_distances.values())}
    ctx.write_metrics(metrics | {"greedy_n_kept": len(kept)})
