"""Diagnosis of one SSL ingredient on a DEV seed (validation only; CLAIMS.md records the runs).

Inter-trains ``--ingredient`` from the dev seed's stock with the small profile (plus JSON
overrides) and prints what the pipeline's metrics do not show: the SSL loss along training, how
far the encoder moved from the stock (relative L2), the label-free kNN val accuracy, and whether
the projection head collapsed (effective rank of its outputs on the val images; MMCR's loss at
full collapse is sqrt(2) - 1/sqrt(B) with the local term, -1/sqrt(B) without).

    PYTHONPATH=$PWD heavy .venv/bin/python -m tests.selfsoup.diagnose_ingredient --seed 100 \
        --ingredient mmcr_local --set '{"inter_train": {"head_lr": 2.5e-4}}' --root /tmp/selfsoup-diag
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from components.common.io import load_torch
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.data import downstream_unlabelled, load_splits
from components.selfsoup.knn import knn_accuracy
from components.selfsoup.soup import weight_distance, weight_norm
from components.selfsoup.ssl import build_decoder, build_encoder, make_learner, mean_cosine, start, train_ssl
from components.selfsoup.vit import embed
from flows.selfsoup import METHOD
from tests.selfsoup.chain import run_chain


def effective_rank(z: torch.Tensor) -> float:
    """exp(entropy of the normalised singular values) of the centred unit embeddings: 1 = collapsed."""
    z = torch.nn.functional.normalize(z, dim=-1)
    s = torch.linalg.svdvals(z - z.mean(0))
    p = s / s.sum().clamp_min(1e-12)
    return float(torch.exp(-(p * p.clamp_min(1e-12).log()).sum()))


def build_stock(cfg, images, stock):
    encoder = build_encoder(cfg.model, images.shape[-1])
    encoder.load_state_dict(stock)
    return encoder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--ingredient", required=True)
    parser.add_argument("--set", default="{}", help="JSON overrides of the small profile")
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args()
    cfg = SelfsoupConfig.for_profile("small", {"seeds": [args.seed]} | json.loads(args.set))
    stock_dir = args.root / "pretrain_stock" / str(args.seed)
    if not (stock_dir / "encoder.pt").exists():
        run_chain(METHOD, cfg, args.root, only_until="pretrain_stock")
    start(args.seed)
    splits = load_splits(args.root / "prepare_data" / "out")
    images, train, val = downstream_unlabelled(splits), splits["train"], splits["val"]
    recipe, it = cfg.inter_train.recipes[args.ingredient], cfg.inter_train
    stock = load_torch(stock_dir / "encoder.pt")
    encoder = build_encoder(cfg.model, images.shape[-1])
    encoder.load_state_dict(stock)
    decoder = None
    if recipe.algo == "mae":
        decoder = build_decoder(cfg.model, encoder)
        decoder.load_state_dict(load_torch(stock_dir / "decoder.pt"))
    learner = make_learner(recipe, encoder, decoder, it.augment)
    t0 = time.time()
    records = train_ssl(learner, images, steps=it.steps, batch=it.batch, lr=recipe.lr, head_lr=it.head_lr,
                        weight_decay=it.weight_decay, warmup_frac=it.warmup_frac)
    out = {"ingredient": args.ingredient, "overrides": json.loads(args.set), "seconds": round(time.time() - t0, 1),
           "loss_curve": [round(r["ssl/loss"], 4) for r in records],
           "encoder_moved": weight_distance(encoder.state_dict(), stock) / weight_norm(stock),
           "knn_val_acc": knn_accuracy(embed(encoder, train["x"]), train["y"], embed(encoder, val["x"]), val["y"])}
    if hasattr(learner, "head"):
        with torch.no_grad():
            head_out = learner.head(embed(encoder, val["x"]))
            out["head_effective_rank_val"] = effective_rank(head_out)
            out["head_mean_cosine_val"] = mean_cosine(head_out)
    out["encoder_effective_rank_val"] = effective_rank(embed(encoder, val["x"]))
    out["encoder_mean_cosine_val"] = mean_cosine(embed(encoder, val["x"]))
    out["stock_mean_cosine_val"] = mean_cosine(embed(build_stock(cfg, images, stock), val["x"]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
