"""v6 calibration on DEV seeds, validation and weights only (CLAIMS.md, "Calibration v6").

Question (issue 32, after v5): why are the MAE ingredients weak after LP-FT, and which MAE
recipe (lr, mask ratio, norm-pix target, fresh decoder, view augmentation) makes them a better
start than the stock, without breaking the basin (P2) or the distinctness (P1)? And is the
fine-tuning under-converged (more epochs / another lr for every model, stock included)?

It extends ``calibrate_v5`` (same stock, same ``inter_train_one``, same cache layout, so v5's
cached ingredients are reused when a recipe is unchanged; the v6 recipe fields enter the cache
key only when they differ from their defaults) and adds per-pair barriers, the MAE ingredients'
own linear-probe / kNN val accuracy, and any extra MAE variants given by ``--variants`` (fine-tuned
beside the pipeline's six, not part of the six-ingredient P1/P2 numbers unless passed through
``--set``). Every model gets the same LP-FT (own probe, then each (lr, epochs) of ``--ft``).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 heavy .venv/bin/python -m tests.selfsoup.calibrate_v6 \
        --seeds 100 101 102 --ft 1e-3:15 --root /tmp/ss8-v6 \
        --variants '{"mae_m50": {"algo": "mae", "lr": 1.25e-4, "mask_ratio": 0.5}}'
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
from components.selfsoup.config import Recipe, SelfsoupConfig
from components.selfsoup.soup import (classifier, encoder_part, midpoint_barrier, start_state, weight_distance,
                                      weight_norm)
from tests.selfsoup import calibrate_v5 as v5

NEW_FIELDS = {"norm_pix": False, "fresh_decoder": False, "augment": True}


def recipe_key(cfg, name: str) -> str:
    """v5's key; v6's recipe fields enter it only when not at their defaults (v5 caches stay valid)."""
    it = cfg.inter_train
    recipe = it.recipes[name].model_dump()
    for k, default in NEW_FIELDS.items():
        if recipe.get(k) == default:
            recipe.pop(k)
    blob = json.dumps({"recipe": recipe, "steps": it.steps, "batch": it.batch,
                       "head_lr": it.head_lr, "wd": it.weight_decay, "warmup": it.warmup_frac,
                       "aug": it.augment.model_dump()}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


v5.recipe_key = recipe_key  # ingredient_state looks it up at call time


def calibrate_seed(cfg, root: Path, seed: int, settings, variants: dict, noise: bool) -> dict:
    t0 = time.time()
    splits, stock_dir = v5.stock_and_splits(cfg, root, seed)
    names = list(cfg.inter_train.ingredients)
    cfg = cfg.model_copy(deep=True)
    for vname, recipe in variants.items():
        cfg.inter_train.recipes[vname] = Recipe(**recipe)
    extra = list(variants)
    states, knn = {"stock": load_torch(stock_dir / "encoder.pt")}, {}
    for n in names + extra:
        states[n], knn[n] = v5.ingredient_state(cfg, n, seed, stock_dir, splits, root / "ingredients")
    t_ssl = time.time() - t0
    stock_head = load_torch(stock_dir / "head_init.pt")
    heads = {n: (stock_head if n == "stock" else v5.own_probe_head(cfg, splits["train"], s)) for n, s in states.items()}
    val, fts = {}, {}
    for n, s in states.items():
        _, val[(n, "lp")] = v5.ft(cfg, splits, s, heads[n], 0.0, 0, seed)
        for lr, epochs in settings:
            fts[(n, lr, epochs)], val[(n, lr, epochs)] = v5.ft(cfg, splits, s, heads[n], lr, epochs, seed)
    best = {n: max(settings, key=lambda st: val[(n, *st)]) for n in states}
    sel = {n: fts[(n, *best[n])] for n in states}
    sel_val = {n: val[(n, *best[n])] for n in states}
    scale = weight_norm(start_state(stock_dir))
    v = splits["val"]
    net = classifier(cfg, v["x"].shape[-1], sel["stock"])
    out = {"seed": seed, "ssl_seconds": round(t_ssl, 1),
           "knn_val": {n: round(100 * a, 1) for n, a in knn.items()},
           "lp_val": {n: round(100 * val[(n, "lp")], 1) for n in states},
           "val": {f"{lr:g}:{ep}": {n: round(100 * val[(n, lr, ep)], 1) for n in states} for lr, ep in settings},
           "selected": {n: f"{best[n][0]:g}:{best[n][1]}" for n in states},
           "minus_stock": {n: round(100 * (sel_val[n] - sel_val["stock"]), 1) for n in names + extra}}
    enc = {n: encoder_part(s) for n, s in sel.items()}
    out["ssl_move"] = {n: round(weight_distance({f"encoder.{k}": t for k, t in states[n].items()},
                                                {f"encoder.{k}": t for k, t in states["stock"].items()}) / scale, 4)
                       for n in names + extra}
    pairs = list(itertools.combinations(names, 2))
    dist = {f"{a}__{b}": weight_distance(sel[a], sel[b]) / scale for a, b in pairs}
    barrier = {f"{a}__{b}": midpoint_barrier(net, sel[a], sel[b], v["x"], v["y"]) for a, b in pairs}
    out |= {"distance_min": round(min(dist.values()), 4), "distance_argmin": min(dist, key=dist.get),
            "encoder_distance_min": round(min(weight_distance(enc[a], enc[b]) / scale for a, b in pairs), 4),
            "barrier_mean": round(float(np.mean(list(barrier.values()))), 4),
            "barrier_max": round(max(barrier.values()), 4), "barrier_argmax": max(barrier, key=barrier.get),
            "barriers": {k: round(b, 3) for k, b in barrier.items()}}
    # each extra variant as a drop-in for the MAE ingredients: its barrier with the 4 non-MAE ones
    others = [n for n in names if cfg.inter_train.recipes[n].algo != "mae"]
    out["variant_barrier_mean"] = {x: round(float(np.mean([midpoint_barrier(net, sel[x], sel[o], v["x"], v["y"])
                                                           for o in others])), 4) for x in extra}
    if len(settings) > 1:  # each fine-tuning setting on its own (no per-model choice): P4, P2, P1's floor
        out["per_setting"] = {}
        for lr, ep in settings:
            st = {n: fts[(n, lr, ep)] for n in states}
            b = [midpoint_barrier(net, st[a], st[b_], v["x"], v["y"]) for a, b_ in pairs]
            row = {"stock_val": round(100 * val[("stock", lr, ep)], 1),
                   "minus_stock": {n: round(100 * (val[(n, lr, ep)] - val[("stock", lr, ep)]), 1) for n in names + extra},
                   "barrier_mean": round(float(np.mean(b)), 4), "barrier_max": round(max(b), 4),
                   "variant_barrier_mean": {x: round(float(np.mean([midpoint_barrier(net, st[x], st[o], v["x"], v["y"])
                                                                    for o in others])), 4) for x in extra},
                   "encoder_distance_min": round(min(weight_distance(encoder_part(st[a]), encoder_part(st[b_])) / scale
                                                     for a, b_ in pairs), 4)}
            if noise:
                ns, nv = v5.ft(cfg, splits, states["stock"], heads["stock"], lr, ep, seed + 1)
                row["noise_distance"] = round(weight_distance(ns, st["stock"]) / scale, 4)
                row["noise_val_minus"] = round(100 * (nv - val[("stock", lr, ep)]), 1)
            out["per_setting"][f"{lr:g}:{ep}"] = row
    if noise:  # P1's floor: stock -> FT against the same FT under another batch order
        noise_state, _ = v5.ft(cfg, splits, states["stock"], heads["stock"], *best["stock"], seed + 1)
        out["noise_distance"] = round(weight_distance(noise_state, sel["stock"]) / scale, 4)
    out["seconds"] = round(time.time() - t0, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[103, 104, 105])
    parser.add_argument("--ft", nargs="+", default=["1e-3:15"], help="fine-tune grid lr:epochs")
    parser.add_argument("--set", default="{}", help="JSON overrides of the small profile")
    parser.add_argument("--variants", default="{}", help="JSON {name: recipe} of extra MAE variants")
    parser.add_argument("--noise", action="store_true", help="also measure the FT-noise distance")
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args()
    settings = [(float(s.split(":")[0]), int(s.split(":")[1])) for s in args.ft]
    variants = json.loads(args.variants)
    rows = []
    for seed in args.seeds:
        cfg = SelfsoupConfig.for_profile("small", {"seeds": [seed]} | json.loads(args.set))
        rows.append(calibrate_seed(cfg, args.root, seed, settings, variants, args.noise))
        print(json.dumps(rows[-1]), flush=True)
    names = list(rows[0]["minus_stock"])
    gap = {n: round(float(np.mean([r["minus_stock"][n] for r in rows])), 2) for n in names}
    print(json.dumps({"SUMMARY": {
        "overrides": json.loads(args.set), "variants": variants, "ft": args.ft,
        "stock_val": [max(r["val"][k]["stock"] for k in r["val"]) for r in rows],
        "minus_stock_mean": gap, "minus_stock_per_seed": {n: [r["minus_stock"][n] for r in rows] for n in names},
        "lp_val_mean": {n: round(float(np.mean([r["lp_val"][n] for r in rows])), 1) for n in rows[0]["lp_val"]},
        "distance_min": [r["distance_min"] for r in rows], "encoder_distance_min": [r["encoder_distance_min"] for r in rows],
        "noise_distance": [r.get("noise_distance") for r in rows],
        "barrier_mean": [r["barrier_mean"] for r in rows],
        "barrier_mean_3seed": round(float(np.mean([r["barrier_mean"] for r in rows])), 4),
        "variant_barrier_mean": {x: [r["variant_barrier_mean"][x] for r in rows] for x in variants}}}), flush=True)
    if "per_setting" in rows[0]:
        for key in rows[0]["per_setting"]:
            ps = [r["per_setting"][key] for r in rows]
            print(json.dumps({"SETTING": key, "stock_val": [p["stock_val"] for p in ps],
                              "minus_stock_mean": {n: round(float(np.mean([p["minus_stock"][n] for p in ps])), 2) for n in names},
                              "minus_stock_per_seed": {n: [p["minus_stock"][n] for p in ps] for n in names},
                              "barrier_mean": [p["barrier_mean"] for p in ps],
                              "barrier_mean_3seed": round(float(np.mean([p["barrier_mean"] for p in ps])), 4),
                              "variant_barrier_mean": {x: [p["variant_barrier_mean"][x] for p in ps] for x in variants},
                              "encoder_distance_min": [p["encoder_distance_min"] for p in ps],
                              "noise_distance": [p.get("noise_distance") for p in ps],
                              "noise_val_minus": [p.get("noise_val_minus") for p in ps]}), flush=True)


if __name__ == "__main__":
    main()
