"""P4 diagnosis on DEV seeds, validation only (CLAIMS.md records the runs).

Why do SSL ingredients not beat the stock after fine-tuning? Builds the dev seed's stock and its
ingredients with the small profile (plus JSON overrides), then fine-tunes the stock and every
ingredient under each (lr, epochs) setting of ``--ft`` with the same batches, and prints val
accuracy and ingredient - stock (points). ``--own-head`` also fine-tunes each ingredient from a
linear probe of its *own* features (not the shared stock probe) at the first setting, to see
whether the shared head init is what holds the ingredients back.

    PYTHONPATH=$PWD heavy .venv/bin/python -m tests.selfsoup.diagnose_p4 --seeds 100 101 \
        --ft 1e-3:60 2e-3:60 --root /tmp/selfsoup-p4
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from components.common.io import load_torch
from components.common.seeds import seed_everything
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.data import load_splits
from components.selfsoup.finetune import accuracy, build_classifier, fine_tune
from components.selfsoup.ssl import build_encoder, linear_probe_head, start
from components.selfsoup.vit import embed
from flows.selfsoup import METHOD
from tests.selfsoup.chain import run_chain


def ft_val(cfg, splits, encoder_state, head_state, lr: float, epochs: int, seed: int) -> float:
    ft = cfg.finetune.model_copy(update={"epochs": epochs})
    seed_everything(seed)  # the pipeline's batches: same for every model of a seed
    model = build_classifier(cfg, splits["train"]["x"].shape[-1], encoder_state, head_state)
    fine_tune(model, splits["train"], ft, lr)
    return accuracy(model, splits["val"]["x"], splits["val"]["y"])


def own_head(cfg, splits, encoder_state) -> dict:
    encoder = build_encoder(cfg.model, splits["train"]["x"].shape[-1])
    encoder.load_state_dict(encoder_state)
    return linear_probe_head(embed(encoder, splits["train"]["x"]).numpy(), splits["train"]["y"].numpy(),
                             cfg.stock.probe_c, cfg.model.num_classes)


def diagnose_seed(cfg, root: Path, seed: int, settings: list[tuple[float, int]], with_own_head: bool) -> dict:
    t0 = time.time()
    summaries = run_chain(METHOD, cfg, root, only_until="inter_train")
    start(seed)
    splits = load_splits(root / "prepare_data" / "out")
    stock_dir = root / "pretrain_stock" / str(seed)
    head = load_torch(stock_dir / "head_init.pt")
    states = {"stock": load_torch(stock_dir / "encoder.pt")}
    states |= {n: load_torch(root / "inter_train" / str(seed) / n / "encoder.pt") for n in cfg.inter_train.ingredients}
    knn = summaries[f"inter_train/{seed}"] | {"stock_knn_val_acc": summaries[f"pretrain_stock/{seed}"]["knn_val_acc"]}
    out = {"knn_val_acc": {k: round(v, 3) for k, v in knn.items() if k.endswith("knn_val_acc")}, "ft": {}}
    for lr, epochs in settings:
        val = {n: ft_val(cfg, splits, s, head, lr, epochs, seed) for n, s in states.items()}
        out["ft"][f"{lr:g}:{epochs}"] = {"stock_val": round(100 * val["stock"], 1),
                                         "minus_stock": {n: round(100 * (v - val["stock"]), 1)
                                                         for n, v in val.items() if n != "stock"}}
    if with_own_head:
        lr, epochs = settings[0]
        stock_val = out["ft"][f"{lr:g}:{epochs}"]["stock_val"]
        out["own_head_minus_stock"] = {
            n: round(100 * ft_val(cfg, splits, s, own_head(cfg, splits, s), lr, epochs, seed) - stock_val, 1)
            for n, s in states.items() if n != "stock"}
    out["seconds"] = round(time.time() - t0, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[100])
    parser.add_argument("--ft", nargs="+", default=["1e-3:60"], help="fine-tune settings lr:epochs")
    parser.add_argument("--own-head", action="store_true")
    parser.add_argument("--set", default="{}", help="JSON overrides of the small profile")
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args()
    settings = [(float(s.split(":")[0]), int(s.split(":")[1])) for s in args.ft]
    for seed in args.seeds:
        cfg = SelfsoupConfig.for_profile("small", {"seeds": [seed]} | json.loads(args.set))
        out = {"seed": seed, "overrides": json.loads(args.set)}
        out |= diagnose_seed(cfg, args.root / str(seed), seed, settings, args.own_head)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
