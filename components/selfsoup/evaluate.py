"""Evaluation on clean and corrupted test sets, and the pass criteria of CLAIMS.md over seeds."""
from __future__ import annotations

import numpy as np

from components.common.io import load_torch, read_json, read_table, write_json_atomic, write_table
from components.common.metrics import paired_difference, summarize
from components.selfsoup.data import load_corrupted, load_splits
from components.selfsoup.soup import classifier, evaluate_model, midpoint_barrier
from components.selfsoup.ssl import start

SOUPS = ("uniform_soup", "greedy_soup")


def evaluate_stage(cfg, ctx) -> None:
    seed = ctx.item["seed"]
    start(seed)
    data_dir = ctx.inputs["prepare_data"]
    test = load_splits(data_dir)["test"]
    corrupted = load_corrupted(data_dir)
    models = {m: ctx.inputs["fine_tune"][f"{m}-{seed}"] / "model.pt" for m in cfg.finetune.models}
    models |= {s: ctx.inputs["soup"][str(seed)] / f"{s}.pt" for s in SOUPS}
    shift = {f"{c}_{cfg.data.shift_severity}" for c in cfg.data.shift_corruptions}
    rows = []
    for model, path in models.items():
        net = classifier(cfg, test["x"].shape[-1], load_torch(path))
        for set_name, x in ({"clean": test["x"]} | corrupted).items():
            r = evaluate_model(net, x, test["y"])
            corruption, _, severity = set_name.rpartition("_")
            rows.append({"seed": seed, "model": model, "set": set_name,
                         "corruption": corruption or "clean", "severity": int(severity) if corruption else 0,
                         "in_shift": set_name in shift, "acc": r["acc"], "nll": r["nll"]})
    write_table(ctx.out_dir / "metrics.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    ctx.write_metrics({f"{m}_test_acc": r["acc"] for r in rows if r["set"] == "clean" for m in [r["model"]]})


def _per_seed(df, model: str, column: str = "acc", **where) -> dict[int, float]:
    sel = df[df.model == model]
    for key, value in where.items():
        sel = sel[sel[key] == value]
    return sel.groupby("seed")[column].mean().to_dict()


def _points(values) -> list[float]:
    return [100 * v for v in values]


def cross_init_barriers(cfg, fine_tune_inputs: dict, seeds: list[int], test) -> list[float]:
    """Control: stock->FT models of different seeds come from different random initialisations."""
    pairs = list(zip(seeds, seeds[1:] + seeds[:1])) if len(seeds) > 2 else list(zip(seeds[:1], seeds[1:]))
    return [midpoint_barrier(cfg, load_torch(fine_tune_inputs[f"stock-{a}"] / "model.pt"),
                             load_torch(fine_tune_inputs[f"stock-{b}"] / "model.pt"), test["x"], test["y"])
            for a, b in pairs]


def report_stage(cfg, ctx) -> None:
    import pandas as pd

    start(0)
    seeds, crit = list(cfg.seeds), cfg.criteria
    df = pd.concat([read_table(ctx.inputs["evaluate"][str(s)] / "metrics.parquet").to_pandas() for s in seeds])
    write_table(ctx.out_dir / "all_metrics.parquet", df)
    clean = df[df.set == "clean"]
    ingredients = list(cfg.inter_train.ingredients)
    acc = {m: [v for _, v in sorted(_per_seed(clean, m).items())] for m in clean.model.unique()}
    ing = np.array([acc[m] for m in ingredients])            # (n_ingredients, n_seeds)
    soup = np.array(acc["uniform_soup"])
    results: dict = {"clean_test_acc": {m: summarize(_points(v)) for m, v in acc.items()}}

    # (a) cross-algorithm soup vs its ingredients
    over_mean = paired_difference(_points(soup), _points(ing.mean(0)))
    over_best = paired_difference(_points(soup), _points(ing.max(0)))
    results["a"] = {"soup_minus_mean_ingredient": over_mean, "soup_minus_best_ingredient": over_best,
                    "beats_best_every_seed": bool((soup > ing.max(0)).all()),
                    "pass": over_mean["mean"] >= crit.soup_over_mean and over_best["mean"] >= crit.soup_vs_best}

    # (b) not degenerate + linear mode connectivity vs a different-init control
    soups = [read_json(ctx.inputs["soup"][str(s)] / "soup.json") for s in seeds]
    same = [np.mean(list(s["barriers"].values())) for s in soups if s["barriers"]]
    test = load_splits(ctx.inputs["prepare_data"])["test"]
    control = cross_init_barriers(cfg, ctx.inputs["fine_tune"], seeds, test) if len(seeds) > 1 and "stock" in acc else []
    ratio = float(np.mean(soup / ing.max(0)))
    results["b"] = {"soup_over_best_ratio": ratio, "barrier_same_stock": summarize(same) if same else None,
                    "barrier_different_init": summarize(control) if control else None}
    results["b"]["pass"] = bool(same and control and ratio >= crit.soup_vs_best_ratio
                                and np.mean(same) < crit.barrier_same_stock
                                and np.mean(control) > crit.barrier_different_init)

    # (c) robustness: self-soup on corrupted test (unlabelled) then FT back, vs stock -> FT
    corrupted = df[(df.set != "clean") & df.in_shift]
    everything = df[df.set != "clean"]
    robust = {}
    for model in ("stock", "selfsoup_clean", "selfsoup_shift"):
        if model in acc:
            robust[model] = {"clean": acc[model],
                             "shift_sets": [v for _, v in sorted(_per_seed(corrupted, model).items())],
                             "all_corruptions": [v for _, v in sorted(_per_seed(everything, model).items())]}
    if {"stock", "selfsoup_shift"} <= robust.keys():
        gain = paired_difference(_points(robust["selfsoup_shift"]["shift_sets"]), _points(robust["stock"]["shift_sets"]))
        clean_delta = paired_difference(_points(robust["selfsoup_shift"]["clean"]), _points(robust["stock"]["clean"]))
        results["c"] = {"corrupted_gain": gain, "clean_delta": clean_delta,
                        "all_corruptions_gain": paired_difference(_points(robust["selfsoup_shift"]["all_corruptions"]),
                                                                  _points(robust["stock"]["all_corruptions"])),
                        "pass": gain["mean"] >= crit.robust_gain and clean_delta["mean"] >= -crit.robust_clean_drop}
        if "selfsoup_clean" in robust:
            results["c"]["control_gain"] = paired_difference(_points(robust["selfsoup_clean"]["shift_sets"]),
                                                             _points(robust["stock"]["shift_sets"]))
    results["robustness_acc"] = {m: {k: summarize(_points(v)) for k, v in r.items()} for m, r in robust.items()}

    # (d) self-seasoning (no labels) vs the stock, both by weighted kNN
    seasons = [read_json(ctx.inputs["self_season"][str(s)] / "season.json") for s in seeds]
    knn = {k: [s[k] for s in seasons] for k in seasons[0] if k.startswith("knn_")}
    d_gain = paired_difference(_points(knn["knn_seasoned"]), _points(knn["knn_stock"]))
    results["d"] = {"seasoned_minus_stock": d_gain, "knn_acc": {k: summarize(_points(v)) for k, v in knn.items()},
                    "weights": [s["weights"] for s in seasons], "pass": d_gain["mean"] >= 0}

    write_json_atomic(ctx.out_dir / "report.json", results)
    ctx.write_metrics({f"pass_{c}": bool(results[c]["pass"]) for c in "abcd" if c in results}
                      | {"soup_acc": summarize(_points(soup))["mean"],
                         "best_ingredient_acc": float(np.mean(_points(ing.max(0)))),
                         "mean_ingredient_acc": float(np.mean(_points(ing.mean(0))))})
