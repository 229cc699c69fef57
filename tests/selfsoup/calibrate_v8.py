"""v8 calibration on DEV seeds, validation and weights only (CLAIMS.md, "Calibration v8").

Issue 32 after v7: P2 (mean midpoint barrier of the 15 fine-tuned ingredient pairs) is large on
some dev seeds (107: MMCR x LeJEPA 0.95 nats). Where does the barrier come from?

  (1) heads or encoders: every LP-FT model has its own probe head, fitted on its own features.
      Per pair, besides the pipeline's barrier (``full``: encoder and head interpolated), the
      midpoint encoder with either endpoint's head (``head_a`` / ``head_b``), either endpoint's
      encoder with the midpoint head (``enc_a`` / ``enc_b``), and a *feature* barrier: a probe
      refitted on the midpoint encoder's frozen features against probes refitted on the
      endpoints' encoders (``refit``; no head enters from either model).
  (2) before or after fine-tuning: the same on the SSL encoders with their own probes (LP, no FT).
  (3) the fix F1 (``--fix '{"head": "stock"}'``): every model, the stock and each ingredient alike,
      starts fine-tuning from the stock's probe head (``finetune.probe: false``) instead of its own.

Reuses v7's cached stock and ingredients (read-only) and the pipeline's fine-tuning (``v5.ft``).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 heavy .venv/bin/python -m tests.selfsoup.calibrate_v8 \
        --seeds 107 106 108 100 101 102 103 104 105 --diagnose --out /tmp/ss10/diag.jsonl
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 heavy .venv/bin/python -m tests.selfsoup.calibrate_v8 \
        --seeds 107 106 108 102 100 101 103 104 105 --orders 3 --fix '{"head": "stock"}' --out /tmp/ss10/fix_stock.jsonl
    (judged with ``calibrate_v7.judge``; P3 from the saved stock -> FT, identical to v7's under F1)
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch

from components.common.io import load_torch, save_torch
from components.common.soups import interpolate
from components.selfsoup.config import Recipe, SelfsoupConfig
from components.selfsoup.finetune import own_probe_head
from components.selfsoup.soup import (classifier, encoder_barrier, encoder_part, evaluate_state, midpoint_barrier,
                                      refit_nll, start_state, weight_distance, weight_norm)
from tests.selfsoup import calibrate_v5 as v5
from tests.selfsoup import calibrate_v7 as v7

KEPT = ["m50_lr1", "m25_lr1"]  # v7's selected MAE pair, beside the four non-MAE ingredients


def split(state: dict) -> tuple[dict, dict]:
    """A classifier state as (encoder entries, head entries), prefixes kept."""
    enc = encoder_part(state)
    return enc, {k: v for k, v in state.items() if k not in enc}


def bare(encoder: dict) -> dict:
    return {k.removeprefix("encoder."): v for k, v in encoder.items()}


def as_classifier(encoder: dict, head: dict) -> dict:
    return {f"encoder.{k}": v for k, v in encoder.items()} | {f"head.{k}": v for k, v in head.items()}


def decompose(cfg, net, train, val, a: dict, b: dict, refit_nll) -> dict:
    """The barrier of one pair and its parts (nats; midpoint minus the mean of the endpoints)."""
    x, y = val["x"], val["y"]
    nll = lambda s: evaluate_state(net, s, x, y)["nll"]  # noqa: E731
    ends = (nll(a) + nll(b)) / 2
    (ea, ha), (eb, hb) = split(a), split(b)
    emid, hmid = split(interpolate(a, b, 0.5))
    out = {"full": midpoint_barrier(net, a, b, x, y),
           "head_a": nll(emid | ha) - ends, "head_b": nll(emid | hb) - ends,
           "enc_a": nll(ea | hmid) - ends, "enc_b": nll(eb | hmid) - ends}
    # feature barrier: every encoder (ends and midpoint) gets its own refitted probe; the
    # pipeline's P2 since v9 (soup.encoder_barrier)
    out["refit"] = encoder_barrier(cfg, net, a, b, train, val, nll=refit_nll)
    return out


def make_refit(cfg, net, train, val):
    """soup.refit_nll of a classifier state, cached per state object (endpoints recur across pairs)."""
    cache = {}

    def nll(state: dict) -> float:
        key = id(state)
        if key not in cache:
            cache[key] = (state, refit_nll(cfg, net, state, train, val))
        return cache[key][1]
    return nll


def heads_for(cfg, fix: dict, states: dict, stock_head: dict, train: dict) -> dict:
    heads = {n: stock_head if n == "stock" else own_probe_head(cfg, train, s) for n, s in states.items()}
    if fix.get("head") == "stock":  # F1: one shared head init, the stock's probe (finetune.probe: false)
        heads = {n: stock_head for n in states}
    return heads


OUT = Path("/tmp/ss10/ft")


def root_out(seed: int, fix: dict) -> Path:
    """Where a fix's stock -> FT of a seed is kept (the fine_tune stage's layout) for P3."""
    return OUT / (json.dumps(fix, sort_keys=True).replace(" ", "").replace('"', "") or "base") / str(seed)


def calibrate_seed(cfg, root: Path, seed: int, fix: dict, orders: int, diagnose: bool) -> dict:
    t0 = time.time()
    splits, stock_dir = v5.stock_and_splits(cfg, root, seed)
    cfg = cfg.model_copy(deep=True)
    for name in KEPT:
        cfg.inter_train.recipes[name] = Recipe(**v7.POOL[name])
    others = [n for n in cfg.inter_train.ingredients if cfg.inter_train.recipes[n].algo != "mae"]
    names = others + KEPT
    states = {"stock": load_torch(stock_dir / "encoder.pt")}
    for n in names:
        states[n], _ = v5.ingredient_state(cfg, n, seed, stock_dir, splits, root / "ingredients")
    train, val = splits["train"], splits["val"]
    heads = heads_for(cfg, fix, states, load_torch(stock_dir / "head_init.pt"), train)
    lr, epochs = cfg.finetune.lrs[0], cfg.finetune.epochs
    fts, acc = {}, {}
    for n, s in states.items():
        for o in range(orders):
            fts[(n, o)], acc[(n, o)] = v5.ft(cfg, splits, s, heads[n], lr, epochs, v7.order_seed(seed, o))
    net = classifier(cfg, val["x"].shape[-1], fts[("stock", 0)])
    pairs = list(itertools.combinations(names, 2))
    ft_models = {n: fts[(n, 0)] for n in states}
    row = {"seed": seed, "fix": fix, "val": {n: [round(100 * acc[(n, o)], 1) for o in range(orders)] for n in states},
           "barrier": {f"{a}__{b}": round(midpoint_barrier(net, ft_models[a], ft_models[b], val["x"], val["y"]), 4)
                       for a, b in pairs}}
    scale = weight_norm(start_state(stock_dir))  # P1's relative distances, as the soup stage
    row["distance"] = {f"{a}__{b}": round(weight_distance(ft_models[a], ft_models[b]) / scale, 4) for a, b in pairs}
    row["encoder_distance"] = {f"{a}__{b}": round(weight_distance(encoder_part(ft_models[a]), encoder_part(ft_models[b]))
                                                  / scale, 4) for a, b in pairs}
    row["noise_distance"] = [round(weight_distance(fts[("stock", o)], ft_models["stock"]) / scale, 4)
                             for o in range(1, orders)]
    save_torch(root_out(seed, fix) / "stock" / "model.pt", ft_models["stock"])  # for P3 (cross_init_barriers)
    if diagnose:
        refit = make_refit(cfg, net, train, val)
        lp_models = {n: as_classifier(states[n], heads[n]) for n in states}
        row["ft"] = {f"{a}__{b}": {k: round(v, 4) for k, v in decompose(cfg, net, train, val, ft_models[a], ft_models[b],
                                                                         refit).items()} for a, b in pairs}
        row["lp"] = {f"{a}__{b}": {k: round(v, 4) for k, v in decompose(cfg, net, train, val, lp_models[a], lp_models[b],
                                                                         refit).items()} for a, b in pairs}
        row["lp_val"] = {n: round(100 * evaluate_state(net, m, val["x"], val["y"])["acc"], 1) for n, m in lp_models.items()}
        row["head_norm"] = {n: [round(float(heads[n]["weight"].norm()), 2), round(float(ft_models[n]["head.weight"].norm()), 2)]
                            for n in states}
    row["seconds"] = round(time.time() - t0, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[106, 107, 108])
    parser.add_argument("--root", type=Path, default=Path("/tmp/ss9-v7"), help="v7's cache (read only)")
    parser.add_argument("--fix", default="{}", help='JSON: {} (v5 LP-FT) or {"head": "stock"} (F1)')
    parser.add_argument("--orders", type=int, default=1)
    parser.add_argument("--diagnose", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with args.out.open("a") as f:
        for seed in args.seeds:
            cfg = SelfsoupConfig.for_profile("small", {"seeds": [seed]})
            row = calibrate_seed(cfg, args.root, seed, json.loads(args.fix), args.orders, args.diagnose)
            f.write(json.dumps(row) + "\n")
            f.flush()
            b = list(row["barrier"].values())
            print(json.dumps({"seed": seed, "fix": row["fix"], "barrier_mean": round(float(np.mean(b)), 3),
                              "seconds": row["seconds"]}), flush=True)


if __name__ == "__main__":
    main()
