"""v7 calibration on DEV seeds, validation and weights only (CLAIMS.md, "Calibration v7").

Issue 32 after v6: (1) P4 compares single fine-tunes whose batch order alone moves val accuracy
by +-5 points; here EVERY model (stock and each ingredient alike) is fine-tuned under ``--orders``
batch orders and P4 compares mean val accuracies; the first order (the pipeline's) is what P1
and P2 are measured on, as the soup keeps it. (2) Which pair of MAE recipes (two variants of one
algorithm, as the paper varies SSL hyper-parameters) makes all four premises hold?

Every MAE variant of ``--pool`` is inter-trained (``inter_train_one``, cached as in v5/v6) and
fine-tuned next to the four non-MAE ingredients of the small profile; each candidate set (the
four + a pair of pool variants, ``--pairs``) is then judged from the same fine-tunes:
P1 smallest whole-model distance (order 0) against the FT-noise floor (stock order 0 vs each
other order), P2 mean midpoint barrier over the set's 15 pairs (order 0), P4 smallest
ingredient - stock of the k-order mean val accuracy (and, for comparison, of order 0 alone).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 heavy .venv/bin/python -m tests.selfsoup.calibrate_v7 \
        --seeds 100 101 102 --orders 3 --root /tmp/ss9-v7 --out /tmp/ss9-A.jsonl
    PYTHONPATH=$PWD .venv/bin/python -m tests.selfsoup.calibrate_v7 --show --seeds 100 101 102 103 104 105 \
        --root /tmp/ss9-v7 --out /tmp/ss9-A.jsonl /tmp/ss9-B.jsonl
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
from components.selfsoup.config import Recipe, SelfsoupConfig
from components.selfsoup.evaluate import cross_init_barriers
from components.selfsoup.finetune import order_seed
from components.selfsoup.soup import classifier, encoder_part, midpoint_barrier, start_state, weight_distance, weight_norm
from tests.selfsoup import calibrate_v5 as v5
from tests.selfsoup import calibrate_v6  # noqa: F401  (installs v6's cache key into v5: v6 caches are reused)

# the MAE variants tried (lr, mask ratio); v5's two recipes are mae_lr1 / mae_lr2 of the profile
POOL = {
    "mae_lr1": {"algo": "mae", "lr": 1.25e-4, "mask_ratio": 0.75},
    "mae_lr2": {"algo": "mae", "lr": 2.5e-4, "mask_ratio": 0.75},
    "m50_lr1": {"algo": "mae", "lr": 1.25e-4, "mask_ratio": 0.5},
    "m50_lr2": {"algo": "mae", "lr": 2.5e-4, "mask_ratio": 0.5},
    "m25_lr1": {"algo": "mae", "lr": 1.25e-4, "mask_ratio": 0.25},
    "m50_lr05": {"algo": "mae", "lr": 6.25e-5, "mask_ratio": 0.5},
}


def alias_cached(cache: Path, name: str, key: str) -> None:
    """Reuse an ingredient cached under another name with the same recipe key (the name does not
    enter inter-training: every ingredient of a seed starts from the same RNG state)."""
    target = cache / f"{name}-{key}"
    if not target.exists():
        found = [d for d in sorted(cache.glob(f"*-{key}")) if (d / "encoder.pt").exists()]
        if found:
            target.symlink_to(found[0].resolve())


def calibrate_seed(cfg, root: Path, seed: int, pool: dict, orders: int, by_order: bool = False) -> dict:
    t0 = time.time()
    splits, stock_dir = v5.stock_and_splits(cfg, root, seed)
    cfg = cfg.model_copy(deep=True)
    for name, recipe in pool.items():
        cfg.inter_train.recipes[name] = Recipe(**recipe)
    others = [n for n in cfg.inter_train.ingredients if cfg.inter_train.recipes[n].algo != "mae"]
    states = {"stock": load_torch(stock_dir / "encoder.pt")}
    for n in others + list(pool):
        alias_cached(root / "ingredients" / str(seed), n, v5.recipe_key(cfg, n))
        states[n], _ = v5.ingredient_state(cfg, n, seed, stock_dir, splits, root / "ingredients")
    t_ssl = time.time() - t0
    heads = {n: load_torch(stock_dir / "head_init.pt") if n == "stock" else v5.own_probe_head(cfg, splits["train"], s)
             for n, s in states.items()}
    lr, epochs = cfg.finetune.lrs[0], cfg.finetune.epochs
    t1 = time.time()
    fts, val = {}, {}
    for n, s in states.items():
        for o in range(orders):
            fts[(n, o)], val[(n, o)] = v5.ft(cfg, splits, s, heads[n], lr, epochs, order_seed(seed, o))
    ft_seconds_per_order = (time.time() - t1) / orders
    # for P3: the fine_tune stage's layout (<seed>/stock/model.pt), read by evaluate.cross_init_barriers
    save_torch(root / "ft" / str(seed) / "stock" / "model.pt", fts[("stock", 0)])
    scale = weight_norm(start_state(stock_dir))
    v = splits["val"]
    net = classifier(cfg, v["x"].shape[-1], fts[("stock", 0)])
    sel = {n: fts[(n, 0)] for n in states}
    names = others + list(pool)
    pairs = list(itertools.combinations(names, 2))
    return {
        "seed": seed, "ssl_seconds": round(t_ssl, 1), "ft_seconds_per_order": round(ft_seconds_per_order, 1),
        "val": {n: [round(100 * val[(n, o)], 1) for o in range(orders)] for n in states},
        "noise_distance": [round(weight_distance(fts[("stock", o)], sel["stock"]) / scale, 4) for o in range(1, orders)],
        "noise_encoder_distance": [round(weight_distance(encoder_part(fts[("stock", o)]), encoder_part(sel["stock"])) / scale, 4)
                                   for o in range(1, orders)],
        "distance": {f"{a}__{b}": round(weight_distance(sel[a], sel[b]) / scale, 4) for a, b in pairs},
        "encoder_distance": {f"{a}__{b}": round(weight_distance(encoder_part(sel[a]), encoder_part(sel[b])) / scale, 4)
                             for a, b in pairs},
        "barrier": {f"{a}__{b}": round(midpoint_barrier(net, sel[a], sel[b], v["x"], v["y"]), 4) for a, b in pairs},
        "ssl_move": {n: round(weight_distance({f"encoder.{k}": t for k, t in states[n].items()},
                                              {f"encoder.{k}": t for k, t in states["stock"].items()}) / scale, 4)
                     for n in names},
        "others": others, "seconds": round(time.time() - t0, 1),
        # diagnostic (after the v7 decision): the same premises from each batch order's fine-tunes
        "barrier_mean_by_order": [round(float(np.mean([midpoint_barrier(net, fts[(a, o)], fts[(b, o)], v["x"], v["y"])
                                                        for a, b in pairs])), 4) for o in range(orders)]
        if by_order else None}


def _pair(d: dict, a: str, b: str):
    return d[f"{a}__{b}"] if f"{a}__{b}" in d else d[f"{b}__{a}"]


def judge(rows: list[dict], ingredients: list[str]) -> dict:
    """P1, P2, P4 of one ingredient set over the seeds of ``rows`` (P1's floor is set elsewhere)."""
    pairs = list(itertools.combinations(ingredients, 2))
    barriers = [float(np.mean([_pair(r["barrier"], a, b) for a, b in pairs])) for r in rows]
    gap_k = {n: [float(np.mean(r["val"][n]) - np.mean(r["val"]["stock"])) for r in rows] for n in ingredients}
    gap_1 = {n: [r["val"][n][0] - r["val"]["stock"][0] for r in rows] for n in ingredients}
    p4k = {n: round(float(np.mean(g)), 2) for n, g in gap_k.items()}
    p4_1 = {n: round(float(np.mean(g)), 2) for n, g in gap_1.items()}
    return {"set": ingredients,
            "P1_distance_min": round(min(_pair(r["distance"], a, b) for r in rows for a, b in pairs), 4),
            "P1_encoder_distance_min": round(min(_pair(r["encoder_distance"], a, b) for r in rows for a, b in pairs), 4),
            "P2_barrier_mean": round(float(np.mean(barriers)), 4), "P2_per_seed": [round(b, 3) for b in barriers],
            "P4_k_min": min(p4k.values()), "P4_k_argmin": min(p4k, key=p4k.get), "P4_k": p4k,
            "P4_k_per_seed": {n: [round(x, 1) for x in g] for n, g in gap_k.items()},
            "P4_order0_min": min(p4_1.values()), "P4_order0": p4_1}


def noise_summary(rows: list[dict]) -> dict:
    """How much batch order moves val accuracy: per (model, seed) the spread over orders, and the
    standard deviation of an ingredient - stock gap from one order vs from the k-order mean."""
    k = len(rows[0]["val"]["stock"])
    sd = [float(np.std(v, ddof=1)) for r in rows for v in r["val"].values()]
    s = float(np.sqrt(np.mean(np.square(sd))))  # pooled per-order standard deviation (points)
    return {"orders": k, "val_sd_one_order": round(s, 2), "gap_sd_one_order": round(s * np.sqrt(2), 2),
            "gap_sd_k_mean": round(s * np.sqrt(2 / k), 2),
            "val_range_max": round(max(max(v) - min(v) for r in rows for v in r["val"].values()), 1),
            "noise_distance_max": max(max(r["noise_distance"]) for r in rows),
            "noise_encoder_distance_max": max(max(r["noise_encoder_distance"]) for r in rows),
            "ft_seconds_per_order": [r["ft_seconds_per_order"] for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    parser.add_argument("--orders", type=int, default=3)
    parser.add_argument("--pool", nargs="+", default=list(POOL), help="MAE variants of POOL to inter-train and fine-tune")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, nargs="+", help="JSON lines: one row per seed")
    parser.add_argument("--by-order", action="store_true", help="also the mean barrier of the pool's set per order")
    parser.add_argument("--show", action="store_true", help="judge the sets from --out rows, --seeds in triples")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.show:
        show([str(p) for p in args.out], [args.seeds[i:i + 3] for i in range(0, len(args.seeds), 3)], args.root)
        return
    pool = {n: POOL[n] for n in args.pool}
    with args.out[0].open("a") as f:
        for seed in args.seeds:
            cfg = SelfsoupConfig.for_profile("small", {"seeds": [seed]})
            row = calibrate_seed(cfg, args.root, seed, pool, args.orders, args.by_order)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps({k: row[k] for k in ("seed", "seconds", "ft_seconds_per_order", "val", "barrier_mean_by_order")}), flush=True)


def control_barrier(root: Path, seeds: list[int]) -> float:
    """P3 as the report stage measures it (``evaluate.cross_init_barriers``), from order 0's stock -> FT."""
    from components.selfsoup.data import load_splits

    val = load_splits(root / "stock" / str(seeds[0]) / "prepare_data" / "out")["val"]
    fine_tune = {str(s): root / "ft" / str(s) for s in seeds}
    return float(np.mean(cross_init_barriers(SelfsoupConfig.for_profile("small"), fine_tune, seeds, val)))


def show(paths: list[str], triples: list[list[int]], root: Path) -> None:
    """Print the candidate sets (four non-MAE + each pair of MAE variants) judged on each triple."""
    rows = {r["seed"]: r for p in paths for line in open(p) for r in [json.loads(line)]}
    print(json.dumps({"NOISE": noise_summary([rows[s] for t in triples for s in t if s in rows])}))
    print(json.dumps({"P3": {str(t[0]): round(control_barrier(root, t), 3) for t in triples if all(s in rows for s in t)}}))
    any_row = next(iter(rows.values()))
    others = any_row["others"]
    maes = [n for n in any_row["ssl_move"] if n not in others]
    for a, b in itertools.combinations(maes, 2):
        out = {"pair": [a, b]}
        for t in triples:
            if all(s in rows for s in t):
                j = judge([rows[s] for s in t], [a, b] + others)
                out[str(t[0])] = {k: j[k] for k in ("P1_distance_min", "P1_encoder_distance_min", "P2_barrier_mean",
                                                    "P2_per_seed", "P4_k_min", "P4_k_argmin", "P4_order0_min")}
        print(json.dumps(out))


if __name__ == "__main__":
    main()
