"""Self-seasoning: learn how much of each SSL ingredient (and the stock) goes into the soup,
without labels, by making in-batch nearest neighbours as unambiguous as possible."""
from __future__ import annotations

import math

import torch
from torch.func import functional_call

from components.common.io import load_torch, save_torch, write_json_atomic
from components.common.soups import mix_stacked, stack_state_dicts, uniform_soup, weighted_soup
from components.selfsoup.data import as_float, batches, downstream_unlabelled, load_splits, member_dir
from components.selfsoup.knn import knn_accuracy
from components.selfsoup.losses import knn_neighbour_entropy
from components.selfsoup.ssl import build_encoder, device, start, stock_arch
from components.selfsoup.vit import autocast, device_of, embed


def learn_mixing_weights(encoder, states: list[dict], images: torch.Tensor, s, ctx=None) -> tuple[torch.Tensor, list]:
    """Adam on logits alpha of softmax mixing weights, cosine lr from s.lr to s.lr_min; returns the
    weights of the epoch with the lowest mean neighbour entropy, and the per-epoch losses."""
    dev = device_of(encoder)
    stacked = {k: v.to(dev) for k, v in stack_state_dicts(states).items()}
    alpha = torch.zeros(len(states), device=dev, requires_grad=True)
    optimizer = torch.optim.Adam([alpha], lr=s.lr)
    steps_per_epoch = max(1, len(images) // min(s.batch, len(images)))
    total = s.epochs * steps_per_epoch
    stream = batches(len(images), s.batch, torch.default_generator)
    encoder.eval()
    best_loss, best_weights, history, step = math.inf, alpha.detach().softmax(0).cpu(), [], 0
    for epoch in range(s.epochs):
        epoch_loss = 0.0
        for _ in range(steps_per_epoch):
            for group in optimizer.param_groups:
                group["lr"] = s.lr_min + 0.5 * (s.lr - s.lr_min) * (1 + math.cos(math.pi * step / total))
            params = mix_stacked(stacked, alpha.softmax(0))
            x = as_float(images[next(stream)].to(dev))
            with autocast(dev):
                z = functional_call(encoder, params, (x,))
            loss = knn_neighbour_entropy(z.float(), s.k, s.temperature)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item() / steps_per_epoch
            step += 1
        history.append(epoch_loss)
        if ctx is not None:
            ctx.log_metric("season/entropy", epoch_loss, step=epoch)
        if epoch_loss < best_loss:  # keep the weights at the end of the best epoch
            best_loss, best_weights = epoch_loss, alpha.detach().softmax(0).cpu().clone()
    return best_weights, history


def self_season_stage(cfg, ctx) -> None:
    seed = ctx.item["seed"]
    start(seed)
    splits = load_splits(ctx.inputs["prepare_data"])
    # mixing weights are learned on the task's train + val images without labels; the labelled
    # train split is only the kNN bank that scores the result on test
    images, train, test = downstream_unlabelled(splits), splits["train"], splits["test"]
    names = ["stock"] + list(cfg.inter_train.ingredients)
    stock_dir = ctx.inputs["pretrain_stock"][str(seed)]
    states = [load_torch(stock_dir / "encoder.pt")]
    states += [load_torch(member_dir(ctx.inputs["inter_train"], seed, n) / "encoder.pt") for n in names[1:]]
    encoder = build_encoder(cfg.model, images.shape[-1], stock_arch(stock_dir)).to(device(cfg.model))
    weights, history = learn_mixing_weights(encoder, states, images, cfg.season, ctx)

    s = cfg.season
    def knn_acc(state):
        encoder.load_state_dict(state)
        return knn_accuracy(embed(encoder, train["x"]), train["y"], embed(encoder, test["x"]), test["y"],
                            k=s.knn_k, temperature=s.knn_temperature, num_classes=cfg.model.num_classes)

    seasoned = weighted_soup(states, weights.tolist())
    accs = {f"knn_{n}": knn_acc(st) for n, st in zip(names, states)}
    accs["knn_uniform_ssl_soup"] = knn_acc(uniform_soup(states[1:]))
    accs["knn_seasoned"] = knn_acc(seasoned)
    save_torch(ctx.out_dir / "seasoned_encoder.pt", seasoned)
    alpha = dict(zip(names, weights.tolist()))
    write_json_atomic(ctx.out_dir / "season.json", {"weights": alpha, "entropy_per_epoch": history} | accs)
    ctx.write_metrics(accs | {f"weight_{n}": w for n, w in alpha.items()})
