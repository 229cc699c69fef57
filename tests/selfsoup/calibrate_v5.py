"""v5 calibration on DEV seeds, validation and weights only (CLAIMS.md, "Calibration v5").

Question: with a fine-tuning that is a small step next to the SSL inter-training (LP-FT: a
linear probe of the model's own features, then a short low-lr full fine-tune), do the premises
hold? For every dev seed it builds the stock (pipeline stages) and each ingredient (the
pipeline's ``inter_train_one``, cached per recipe so that a recipe knob retrains one ingredient
only), fine-tunes the stock and every ingredient under each (lr, epochs) of ``--ft`` with the
same batches, picks each model's lr on val from the grid (as the pipeline does), and prints:
  - val accuracy per model and lr, and ingredient - stock (points) at the selected lrs;
  - P1's noise floor: relative distance between stock -> FT and the same FT under another
    batch order (``seed + 1``); the smallest pairwise distance between fine-tuned ingredients;
  - P2: mean / max midpoint barrier (val NLL) over ingredient pairs.

    PYTHONPATH=$PWD heavy .venv/bin/python -m tests.selfsoup.calibrate_v5 --seeds 100 101 102 \
        --ft 1e-4:15 3e-4:15 --head own --root /tmp/selfsoup-v5
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import time
from pathlib import Path

import numpy as np

from components.common.io import load_torch
from components.common.seeds import seed_everything
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.data import downstream_unlabelled, load_splits
from components.selfsoup.finetune import accuracy, build_classifier, fine_tune, own_probe_head
from components.selfsoup.knn import knn_accuracy
from components.selfsoup.soup import classifier, midpoint_barrier, start_state, weight_distance, weight_norm
from components.selfsoup.ssl import build_encoder, cpu_state, inter_train_one, start
from components.selfsoup.vit import embed
from flows.selfsoup import METHOD
from tests.selfsoup.chain import run_chain


def recipe_key(cfg, name: str) -> str:
    it = cfg.inter_train
    blob = json.dumps({"recipe": it.recipes[name].model_dump(), "steps": it.steps, "batch": it.batch,
                       "head_lr": it.head_lr, "wd": it.weight_decay, "warmup": it.warmup_frac,
                       "aug": it.augment.model_dump()}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def ingredient_state(cfg, name: str, seed: int, stock_dir: Path, splits: dict, cache: Path) -> tuple[dict, float]:
    d = cache / str(seed) / f"{name}-{recipe_key(cfg, name)}"
    if not (d / "encoder.pt").exists():
        start(seed)  # as the pipeline's _inter_train: every ingredient from the same RNG state
        inter_train_one(cfg, name, stock_dir, downstream_unlabelled(splits), cfg.inter_train.steps, d)
        (d / "recipe.json").write_text(json.dumps(cfg.inter_train.recipes[name].model_dump()))
    state = load_torch(d / "encoder.pt")
    encoder = build_encoder(cfg.model, splits["train"]["x"].shape[-1])
    encoder.load_state_dict(state)
    tr, va = splits["train"], splits["val"]
    knn = knn_accuracy(embed(encoder, tr["x"]), tr["y"], embed(encoder, va["x"]), va["y"], num_classes=cfg.model.num_classes)
    return state, knn


def ft(cfg, splits, encoder_state, head, lr: float, epochs: int, order_seed: int):
    seed_everything(order_seed)
    model = build_classifier(cfg, splits["train"]["x"].shape[-1], encoder_state, head)
    if epochs:
        fine_tune(model, splits["train"], cfg.finetune.model_copy(update={"epochs": epochs}), lr)
    return cpu_state(model), accuracy(model, splits["val"]["x"], splits["val"]["y"])


def stock_and_splits(cfg, root: Path, seed: int) -> tuple[dict, Path]:
    """The seed's data splits and stock folder, pre-training the stock once (cached in root)."""
    stock_root = root / "stock" / str(seed)
    if not (stock_root / "pretrain_stock" / str(seed) / "encoder.pt").exists():
        run_chain(METHOD, cfg, stock_root, only_until="pretrain_stock")
    start(seed)
    return load_splits(stock_root / "prepare_data" / "out"), stock_root / "pretrain_stock" / str(seed)


def calibrate_seed(cfg, root: Path, seed: int, settings, head_mode: str) -> dict:
    t0 = time.time()
    splits, stock_dir = stock_and_splits(cfg, root, seed)
    names = list(cfg.inter_train.ingredients)
    states, knn = {"stock": load_torch(stock_dir / "encoder.pt")}, {}
    for n in names:
        states[n], knn[n] = ingredient_state(cfg, n, seed, stock_dir, splits, root / "ingredients")
    t_ssl = time.time() - t0
    stock_head = load_torch(stock_dir / "head_init.pt")
    heads = {n: own_probe_head(cfg, splits["train"], s) if head_mode == "own" else stock_head for n, s in states.items()}
    val, fts = {}, {}
    for n, s in states.items():
        _, val[(n, "lp")] = ft(cfg, splits, s, heads[n], 0.0, 0, seed)
        for lr, epochs in settings:
            fts[(n, lr, epochs)], val[(n, lr, epochs)] = ft(cfg, splits, s, heads[n], lr, epochs, seed)
    best = {n: max(settings, key=lambda st: val[(n, *st)]) for n in states}  # lr chosen on val per model
    sel = {n: fts[(n, *best[n])] for n in states}
    sel_val = {n: val[(n, *best[n])] for n in states}
    noise_state, noise_val = ft(cfg, splits, states["stock"], heads["stock"], *best["stock"], seed + 1)
    scale = weight_norm(start_state(stock_dir))
    v = splits["val"]
    net = classifier(cfg, v["x"].shape[-1], sel["stock"])
    pairs = list(itertools.combinations(names, 2))
    dist = {f"{a}__{b}": weight_distance(sel[a], sel[b]) / scale for a, b in pairs}
    enc = {n: {k: t for k, t in s.items() if k.startswith("encoder.")} for n, s in sel.items()}
    enc_noise = weight_distance({k: t for k, t in noise_state.items() if k.startswith("encoder.")}, enc["stock"]) / scale
    enc_dist = {f"{a}__{b}": weight_distance(enc[a], enc[b]) / scale for a, b in pairs}
    barrier = {f"{a}__{b}": midpoint_barrier(net, sel[a], sel[b], v["x"], v["y"]) for a, b in pairs}
    # how far fine-tuning moved each model, next to how far inter-training moved it
    ssl_move = {n: weight_distance({f"encoder.{k}": t for k, t in states[n].items()},
                                   {f"encoder.{k}": t for k, t in states["stock"].items()}) / scale for n in names}
    ft_move = {n: weight_distance({k: t for k, t in sel[n].items() if k.startswith("encoder.")},
                                  {f"encoder.{k}": t for k, t in states[n].items()}) / scale for n in states}
    return {
        "seed": seed, "head": head_mode, "ssl_seconds": round(t_ssl, 1),
        "knn_val": {n: round(100 * a, 1) for n, a in knn.items()},
        "lp_val": {n: round(100 * val[(n, "lp")], 1) for n in states},
        "val": {f"{lr:g}:{ep}": {n: round(100 * val[(n, lr, ep)], 1) for n in states} for lr, ep in settings},
        "selected": {n: f"{best[n][0]:g}:{best[n][1]}" for n in states},
        "minus_stock": {n: round(100 * (sel_val[n] - sel_val["stock"]), 1) for n in names},
        "noise_distance": weight_distance(noise_state, sel["stock"]) / scale,
        "noise_val_minus": round(100 * (noise_val - sel_val["stock"]), 1),
        "distance_min": min(dist.values()), "distance_argmin": min(dist, key=dist.get),
        "encoder_noise_distance": enc_noise, "encoder_distance_min": min(enc_dist.values()),
        "encoder_distance_argmin": min(enc_dist, key=enc_dist.get),
        "barrier_mean": float(np.mean(list(barrier.values()))), "barrier_max": max(barrier.values()),
        "ssl_move": {n: round(m, 4) for n, m in ssl_move.items()},
        "ft_move": {n: round(m, 4) for n, m in ft_move.items()},
        "distances": {k: round(d, 4) for k, d in dist.items()},
        "seconds": round(time.time() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    parser.add_argument("--ft", nargs="+", default=["1e-4:15"], help="fine-tune grid lr:epochs")
    parser.add_argument("--head", choices=["own", "stock"], default="own")
    parser.add_argument("--set", default="{}", help="JSON overrides of the small profile")
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args()
    settings = [(float(s.split(":")[0]), int(s.split(":")[1])) for s in args.ft]
    rows = []
    for seed in args.seeds:
        cfg = SelfsoupConfig.for_profile("small", {"seeds": [seed]} | json.loads(args.set))
        rows.append(calibrate_seed(cfg, args.root, seed, settings, args.head))
        print(json.dumps(rows[-1]), flush=True)
    names = list(rows[0]["minus_stock"])
    gap = {n: round(float(np.mean([r["minus_stock"][n] for r in rows])), 2) for n in names}
    print(json.dumps({"SUMMARY": {"overrides": json.loads(args.set), "ft": args.ft, "head": args.head,
                                  "stock_val": [max(r["val"][k]["stock"] for k in r["val"]) for r in rows],
                                  "minus_stock_mean": gap, "minus_stock_min": min(gap.values()),
                                  "noise_distance": [round(r["noise_distance"], 4) for r in rows],
                                  "noise_val_minus": [r["noise_val_minus"] for r in rows],
                                  "distance_min": [round(r["distance_min"], 4) for r in rows],
                                  "encoder_noise_distance": [round(r["encoder_noise_distance"], 4) for r in rows],
                                  "encoder_distance_min": [round(r["encoder_distance_min"], 4) for r in rows],
                                  "barrier_mean": [round(r["barrier_mean"], 4) for r in rows],
                                  "barrier_mean_3seed": round(float(np.mean([r["barrier_mean"] for r in rows])), 4)}}),
          flush=True)


if __name__ == "__main__":
    main()
