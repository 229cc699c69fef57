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
from components.selfsoup.finetune import own_probe_head
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


def refit_head(cfg, train: dict, state: dict, arch: dict | None = None) -> dict:
    """``state`` (a classifier's) with its head replaced by a linear probe refitted on its own frozen
    train features: the pipeline's probe recipe (``finetune.own_probe_head``, C = finetune.probe_c,
    the stock's). v9: LP-FT models each carry their own probe head, fitted in their own feature
    basis, so averaged heads (and the head half of an interpolated model) mix unrelated bases."""
    encoder = encoder_part(state)
    head = own_probe_head(cfg, train, {k.removeprefix("encoder."): v for k, v in encoder.items()}, arch)
    return encoder | {f"head.{k}": v for k, v in head.items()}


def soup_head(cfg, train: dict, arch: dict | None = None):
    """How a soup (and each greedy candidate) gets its head. Own-probe LP-FT (``finetune.probe``,
    the small profile since v9): a probe refitted on the soup's own features (``refit_head``),
    since the ingredients' heads are not in one basis. One shared head init (the paper's recipe,
    ``finetune.probe: false``): the averaged heads, as the paper soups them."""
    if not cfg.finetune.probe:
        return lambda state: state
    return lambda state: refit_head(cfg, train, state, arch)


def refit_nll(cfg, net: Classifier, state: dict, train: dict, val: dict, arch: dict | None = None) -> float:
    """Validation NLL of ``state``'s encoder under a probe refitted on its own features (``refit_head``)."""
    return evaluate_state(net, refit_head(cfg, train, state, arch), val["x"], val["y"])["nll"]


def encoder_barrier(cfg, net: Classifier, a: dict, b: dict, train: dict, val: dict, arch: dict | None = None,
                    nll=None) -> float:
    """P2 (v9): the midpoint barrier of the encoders (nats): the midpoint encoder and both endpoint
    encoders each scored with a linear probe refitted on its own frozen train features; no head of
    either model enters. ``nll`` (state -> refitted val NLL, default ``refit_nll``) lets a caller
    cache the endpoints."""
    nll = nll or (lambda s: refit_nll(cfg, net, s, train, val, arch))
    return nll(interpolate(a, b, 0.5)) - (nll(a) + nll(b)) / 2


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
    train, arch = splits["train"], stock_arch(stock_dir)
    net = classifier(cfg, val["x"].shape[-1], states[0], arch)

    # v9: under LP-FT every soup's head, the greedy soup's candidates' too, is refitted (soup_head)
    refit = soup_head(cfg, train, arch)
    soups = {"uniform_soup": refit(uniform_soup(states))}
    greedy, kept = greedy_soup(states, val_scores, lambda s: evaluate_state(net, refit(s), val["x"], val["y"])["acc"])
    soups["greedy_soup"] = refit(greedy)
    for soup_name, state in soups.items():
        save_torch(ctx.out_dir / f"{soup_name}.pt", state)

    # premise measurements: validation data and weights only, never test
    # P2 (v9): the encoder barrier, every model (ends and midpoint) with its own refitted probe;
    # the whole-model barrier (each model's own fine-tuned head; P2 up to v8) reported beside it
    ends = {id(s): refit_nll(cfg, net, s, train, val, arch) for s in states}
    nll = lambda s: ends[id(s)] if id(s) in ends else refit_nll(cfg, net, s, train, val, arch)  # noqa: E731
    encoder_barriers = pairwise(names, states, lambda a, b: encoder_barrier(cfg, net, a, b, train, val, arch, nll))
    barriers = pairwise(names, states, lambda a, b: midpoint_barrier(net, a, b, val["x"], val["y"]))
    scale = weight_norm(start_state(stock_dir))
    distances = pairwise(names, states, lambda a, b: weight_distance(a, b) / scale)
    # the encoders alone (v5): with LP-FT every model has its own probe head, so the whole-model
    # distance also counts how far apart the heads are
    encoder_distances = pairwise(names, [encoder_part(s) for s in states], lambda a, b: weight_distance(a, b) / scale)
    summary = {"greedy_kept": [names[i] for i in kept], "barriers": barriers, "encoder_barriers": encoder_barriers,
               "distances": distances, "encoder_distances": encoder_distances}
    write_json_atomic(ctx.out_dir / "soup.json", summary)
    metrics = {f"{k}_val_acc": evaluate_state(net, s, val["x"], val["y"])["acc"] for k, s in soups.items()}
    if barriers:
        metrics |= {"encoder_barrier_mean": sum(encoder_barriers.values()) / len(encoder_barriers),
                    "encoder_barrier_max": max(encoder_barriers.values()),
                    "barrier_mean": sum(barriers.values()) / len(barriers), "barrier_max": max(barriers.values()),
                    "distance_min": min(distances.values()), "distance_mean": sum(distances.values()) / len(distances),
                    "encoder_distance_min": min(encoder_distances.values())}
    ctx.write_metrics(metrics | {"greedy_n_kept": len(kept)})
