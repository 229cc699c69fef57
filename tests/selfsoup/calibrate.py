"""Calibration of the small profile on a DEV seed, validation numbers only (CLAIMS.md records it).

Runs the DAG up to the soup stage with LocalContext (no evaluate: no test number is computed),
then measures the fine-tuning noise floor of the weight distance: the distance between two
stock -> FT runs that differ only in the order of their batches and augmentations.

    PYTHONPATH=$PWD heavy .venv/bin/python -m tests.selfsoup.calibrate --seed 100 \
        --set '{"inter_train": {"steps": 300}}' --root /tmp/selfsoup-cal
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from components.common.io import load_torch, read_json
from components.common.seeds import seed_everything
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.data import load_splits
from components.selfsoup.finetune import accuracy, build_classifier, fine_tune, head_init
from components.selfsoup.soup import start_state, weight_distance, weight_norm
from components.selfsoup.ssl import start
from flows.selfsoup import METHOD
from tests.selfsoup.chain import run_chain


def finetune_noise_distance(cfg, root: Path, seed: int, order_seed: int) -> tuple[float, float]:
    """Relative distance between stock -> FT (the pipeline's, seed ``seed``) and the same FT with
    batches drawn under ``order_seed``; and the val accuracy of the latter."""
    start(seed)
    stock_dir = root / "pretrain_stock" / str(seed)
    splits = load_splits(root / "prepare_data" / "out")
    lr = read_json(root / "fine_tune" / str(seed) / "stock" / "val.json")["lr"]
    encoder = load_torch(stock_dir / "encoder.pt")
    head = head_init(cfg, splits["train"], encoder, stock_dir)  # the pipeline's head (LP-FT: the same probe)
    seed_everything(order_seed)
    model = build_classifier(cfg, splits["train"]["x"].shape[-1], encoder, head)
    fine_tune(model, splits["train"], cfg.finetune, lr)
    reference = load_torch(root / "fine_tune" / str(seed) / "stock" / "model.pt")
    scale = weight_norm(start_state(stock_dir))
    return weight_distance(model.state_dict(), reference) / scale, accuracy(model, splits["val"]["x"], splits["val"]["y"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--set", default="{}", help="JSON overrides of the small profile")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--reuse-stock", action="store_true",
                        help="keep prepare_data and pretrain_stock already under --root")
    args = parser.parse_args()
    cfg = SelfsoupConfig.for_profile("small", {"seeds": [args.seed]} | json.loads(args.set))
    t0 = time.time()
    reuse = frozenset({"prepare_data", "pretrain_stock"} if args.reuse_stock else ())
    summaries = run_chain(METHOD, cfg, args.root, only_until="soup", reuse=reuse)
    seconds = {k: round(v["_seconds"], 1) for k, v in summaries.items()}
    noise, noise_val = finetune_noise_distance(cfg, args.root, args.seed, order_seed=args.seed + 1)
    soup = read_json(args.root / "soup" / str(args.seed) / "soup.json")
    val = {m: summaries[f"fine_tune/{args.seed}"][f"{m}_val_acc"] for m in cfg.finetune.models}
    knn = {k: v for k, v in summaries[f"inter_train/{args.seed}"].items() if k.endswith("knn_val_acc")}
    out = {"overrides": json.loads(args.set), "stock": summaries.get(f"pretrain_stock/{args.seed}"),
           "ingredient_knn_val_acc": knn,
           "val_acc": val, "ingredient_minus_stock_val": {m: 100 * (val[m] - val["stock"])
                                                         for m in cfg.inter_train.ingredients},
           "soup_val": summaries[f"soup/{args.seed}"], "finetune_noise_distance": noise,
           "finetune_noise_val_acc": noise_val, "distances": soup["distances"], "barriers": soup["barriers"],
           "seconds": seconds, "wall": time.time() - t0}
    print(json.dumps(out, indent=1))
    (args.root / "calibration.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
