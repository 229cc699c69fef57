"""Colour-question accuracy (bias-aligned vs bias-conflicting, real vs blurred image), how often
blurred-image answers are the noun's prior colour, per-colour confusion matrices, supervised
token counts, the premise checks (validation split) and the pass criteria (test split)."""
from __future__ import annotations

import numpy as np
import torch

from components.common.io import load_torch, read_json, read_table, write_json_atomic, write_table
from components.common.metrics import paired_difference, summarize
from components.vig import llava
from components.vig.data import COLORS, PRIOR, VOCAB, blur
from components.vig.model import text_logits
from components.vig.train import load_split, new_model

COLOR_NAMES = list(COLORS)
COLOR_IDS = torch.tensor([VOCAB.index(c) for c in COLOR_NAMES])


@torch.no_grad()
def color_predictions(model, images, tokens, grounded, batch_size: int = 512):
    """(predicted, true) colour index (into COLOR_NAMES) at each answer's colour slot, choosing
    among the colour words only."""
    model.eval()
    rows, cols = torch.nonzero(grounded[:, 1:], as_tuple=True)
    assert len(rows) == len(tokens), "each colour answer has exactly one colour slot"
    preds = []
    for s in range(0, len(tokens), batch_size):
        logits = text_logits(model, images[s:s + batch_size], tokens[s:s + batch_size])
        slot = logits[torch.arange(len(logits)), cols[s:s + batch_size]]
        preds.append(slot[:, COLOR_IDS].argmax(-1))
    truth = tokens[:, 1:][rows, cols]
    return torch.cat(preds).numpy(), (truth[:, None] == COLOR_IDS[None]).int().argmax(-1).numpy()


def confusion(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Counts (true colour, predicted colour) in COLOR_NAMES order."""
    cm = np.zeros((len(COLOR_NAMES), len(COLOR_NAMES)), dtype=np.int64)
    np.add.at(cm, (truth, pred), 1)
    return cm


def colour_report(model, split: dict, nouns: list[str], blur_sigma_frac: float) -> dict:
    """Accuracies on bias-conflicting / aligned items with the image and with the blurred image,
    the share of blurred answers that are the noun's prior colour, and both confusion matrices."""
    prior = np.array([COLOR_NAMES.index(PRIOR[n]) for n in nouns])
    out, matrices = {}, {}
    for view, images in (("image", split["images"]), ("blur", blur(split["images"], blur_sigma_frac))):
        pred, truth = color_predictions(model, images, split["tokens"], split["grounded"])
        conflict = truth != prior
        correct = pred == truth
        out[f"acc_conflict_{view}"] = 100 * float(correct[conflict].mean())
        out[f"acc_aligned_{view}"] = 100 * float(correct[~conflict].mean())
        out[f"prior_rate_{view}"] = 100 * float((pred == prior).mean())
        matrices[view] = confusion(pred, truth)
    out["blur_gap_conflict"] = out["acc_conflict_image"] - out["acc_conflict_blur"]
    blurred_answers = matrices["blur"].sum(0)
    out["blur_top_answer_share"] = 100 * float(blurred_answers.max() / blurred_answers.sum())
    return {"metrics": out, "confusion": matrices}


def nouns_of(data_dir, name: str) -> list[str]:
    return read_table(data_dir / f"{name}_samples.parquet").column("noun").to_pylist()


def evaluate_stage(cfg, ctx) -> None:
    if llava.is_paper(cfg):
        return llava.evaluate_stage(cfg, ctx)       # the paper's benchmarks
    torch.set_num_threads(1)
    data_dir = ctx.inputs["prepare_data"]
    splits = {name: (load_split(data_dir, name), nouns_of(data_dir, name)) for name in ("val", "test")}
    rows, matrices = [], {}
    for variant in cfg.train.variants:
        for seed in cfg.seeds:
            arm_dir = ctx.inputs["train_arm"][f"{variant}-{seed}"]
            model = new_model(cfg)
            model.load_state_dict(load_torch(arm_dir / "model.pt"))
            row = {"variant": variant, "seed": seed,
                   "supervised_tokens": read_json(arm_dir / "counts.json")["supervised_tokens"]}
            for name, (split, nouns) in splits.items():
                report = colour_report(model, split, nouns, cfg.vig.blur_sigma_frac)
                row.update({f"{name}_{k}": v for k, v in report["metrics"].items()})
                if name == "test":
                    for view, cm in report["confusion"].items():
                        key = f"{variant}/{view}"
                        matrices[key] = matrices.get(key, 0) + cm
            rows.append(row)
    write_table(ctx.out_dir / "accuracy.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    vig_summary = read_json(ctx.inputs["score_vig"] / "vig_summary.json")
    summary, criteria = judge(rows, vig_summary, cfg.claims, cfg.seeds)
    summary.update(recall_metrics(matrices))
    write_json_atomic(ctx.out_dir / "confusion.json",
                      {"colors": COLOR_NAMES, "rows": "true colour", "cols": "predicted colour",
                       "summed_over_seeds": cfg.seeds, **{k: v.tolist() for k, v in matrices.items()}})
    write_json_atomic(ctx.out_dir / "claims.json", {"summary": summary, "criteria": criteria})
    plot(rows, ctx.out_dir / "accuracy_vs_tokens.png")
    plot_confusion(matrices, ctx.out_dir / "confusion.png")
    flat = {k: v for k, v in summary.items() if isinstance(v, (int, float))}
    ctx.write_metrics({**flat, **{k: float(v) for k, v in criteria.items()},
                       "criteria_pass": float(all(criteria.values()))})


def recall_metrics(matrices: dict) -> dict:
    """Per-colour recall (%) on test images for each arm, and the worst colour's recall."""
    out = {}
    for key, cm in matrices.items():
        variant, view = key.split("/")
        if view != "image":
            continue
        recall = 100 * np.diag(cm) / cm.sum(1).clip(min=1)
        out.update({f"{variant}_recall_{c}": float(r) for c, r in zip(COLOR_NAMES, recall)})
        out[f"{variant}_recall_min"] = float(recall.min())
    return out


METRICS = ("acc_conflict_image", "acc_aligned_image", "acc_conflict_blur", "acc_aligned_blur",
           "blur_gap_conflict", "prior_rate_blur", "prior_rate_image", "blur_top_answer_share")


def judge(rows: list[dict], vig_summary: dict, claims, seeds: list[int]) -> tuple[dict, dict]:
    """Means over seeds per arm, paired VIG-minus-baseline differences on test, the premise
    checks on validation, and the pass criteria."""
    by = lambda variant, key: [r[key] for s in seeds for r in rows if r["variant"] == variant and r["seed"] == s]
    variants = sorted({r["variant"] for r in rows})
    summary: dict = {f"{v}_{split}_{k}" if split == "val" else f"{v}_{k}": summarize(by(v, f"{split}_{k}"))["mean"]
                     for v in variants for split in ("val", "test") for k in METRICS}
    summary.update({f"{v}_supervised_tokens": summarize(by(v, "supervised_tokens"))["mean"] for v in variants})
    summary.update(vig_summary)
    criteria = {
        "a_match_gt_partial_gt_0_gt_conflict": bool(
            vig_summary["vig_match"] > vig_summary["vig_partial"] > 0 > vig_summary["vig_conflict"]),
        "a_grounded_tokens_dominate": bool(vig_summary["d_grounded_mean"] > 0 and
                                           vig_summary["grounded_over_template"] >= claims.grounded_ratio_min),
    }
    if "vanilla" in variants:
        val_conflict = summary["vanilla_val_acc_conflict_image"]
        criteria["p_vision_uncertain"] = claims.premise_conflict_min <= val_conflict <= claims.premise_conflict_max
        criteria["p_blur_follows_prior"] = summary["vanilla_val_prior_rate_blur"] >= claims.premise_blur_prior_min
    if {"vig", "vanilla"} <= set(variants):
        gain = paired_difference(by("vig", "test_acc_conflict_image"), by("vanilla", "test_acc_conflict_image"))
        aligned = paired_difference(by("vig", "test_acc_aligned_image"), by("vanilla", "test_acc_aligned_image"))
        gap = paired_difference(by("vig", "test_blur_gap_conflict"), by("vanilla", "test_blur_gap_conflict"))
        token_ratio = summary["vig_supervised_tokens"] / summary["vanilla_supervised_tokens"]
        summary.update(vig_minus_vanilla_conflict=gain["mean"], vig_minus_vanilla_aligned=aligned["mean"],
                       vig_minus_vanilla_blur_gap=gap["mean"], token_ratio_vig_over_vanilla=token_ratio,
                       vig_minus_vanilla_conflict_wins=gain["wins"])
        criteria["b_beats_vanilla_on_conflict"] = gain["mean"] >= claims.conflict_gain_pts
        criteria["b_aligned_within_tolerance"] = aligned["mean"] >= -claims.aligned_tolerance_pts
        criteria["b_fewer_tokens"] = token_ratio <= claims.token_fraction_max
        criteria["c_larger_blur_gap"] = gap["mean"] >= claims.blur_gap_gain_pts
    if {"vig", "random"} <= set(variants):
        gain = paired_difference(by("vig", "test_acc_conflict_image"), by("random", "test_acc_conflict_image"))
        summary.update(vig_minus_random_conflict=gain["mean"], vig_minus_random_conflict_wins=gain["wins"],
                       token_ratio_random_over_vig=summary["random_supervised_tokens"] / summary["vig_supervised_tokens"])
        criteria["b_beats_random_on_conflict"] = gain["mean"] >= claims.random_gain_pts
    return summary, {k: bool(v) for k, v in criteria.items()}


def plot(rows: list[dict], path) -> None:
    """Accuracy on bias-conflicting test questions vs supervised tokens, one point per arm and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for variant in sorted({r["variant"] for r in rows}):
        pts = [(r["supervised_tokens"], r["test_acc_conflict_image"]) for r in rows if r["variant"] == variant]
        ax.scatter(*zip(*pts), label=variant)
    ax.set_xlabel("supervised answer tokens")
    ax.set_ylabel("acc. bias-conflicting (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_confusion(matrices: dict, path) -> None:
    """One heat map per arm and view (rows: true colour, columns: predicted), summed over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(matrices)
    fig, axes = plt.subplots(2, (len(keys) + 1) // 2, figsize=(3.2 * ((len(keys) + 1) // 2), 6.4), squeeze=False)
    for ax, key in zip(axes.T.flat, keys):
        cm = matrices[key]
        ax.imshow(cm / cm.sum(1, keepdims=True).clip(min=1), vmin=0, vmax=1, cmap="Blues")
        ax.set_title(key, fontsize=9)
        ax.set_xticks(range(len(COLOR_NAMES)), [c[:3] for c in COLOR_NAMES], fontsize=7)
        ax.set_yticks(range(len(COLOR_NAMES)), [c[:3] for c in COLOR_NAMES], fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
