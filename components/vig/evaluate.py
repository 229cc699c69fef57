"""Colour-question accuracy (bias-aligned vs bias-conflicting, real vs blurred image), supervised
token counts, and the pass criteria of CLAIMS.md over seeds."""
from __future__ import annotations

import numpy as np
import torch

from components.common.io import load_torch, read_json, read_table, write_json_atomic, write_table
from components.common.metrics import paired_difference, summarize
from components.vig.data import COLORS, VOCAB, blur
from components.vig.train import load_split, new_model

COLOR_IDS = torch.tensor([VOCAB.index(c) for c in COLORS])


@torch.no_grad()
def color_predictions(model, images, tokens, grounded) -> torch.Tensor:
    """Predicted colour word id at the answer's colour slot, choosing among the colour words only."""
    model.eval()
    logits = model(images, tokens)                       # (N, T-1, V) predicting tokens[:, 1:]
    rows, cols = torch.nonzero(grounded[:, 1:], as_tuple=True)
    assert len(rows) == len(tokens), "each test answer has exactly one colour slot"
    slot_logits = logits[rows, cols][:, COLOR_IDS]
    return COLOR_IDS[slot_logits.argmax(-1)], tokens[:, 1:][rows, cols]


def arm_accuracy(model, test: dict, blurred: torch.Tensor, conflict: np.ndarray) -> dict:
    out = {}
    for view, images in (("image", test["images"]), ("blur", blurred)):
        pred, truth = color_predictions(model, images, test["tokens"], test["grounded"])
        correct = (pred == truth).numpy()
        out[f"acc_conflict_{view}"] = 100 * float(correct[conflict].mean())
        out[f"acc_aligned_{view}"] = 100 * float(correct[~conflict].mean())
    out["blur_gap_conflict"] = out["acc_conflict_image"] - out["acc_conflict_blur"]
    return out


def evaluate_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    data_dir = ctx.inputs["prepare_data"]
    test = load_split(data_dir, "test")
    conflict = np.asarray(read_table(data_dir / "test_samples.parquet").column("conflict").to_pylist())
    blurred = blur(test["images"], cfg.vig.blur_sigma_frac)
    rows = []
    for variant in cfg.train.variants:
        for seed in cfg.seeds:
            arm_dir = ctx.inputs["train_arm"][f"{variant}-{seed}"]
            model = new_model(cfg)
            model.load_state_dict(load_torch(arm_dir / "model.pt"))
            acc = arm_accuracy(model, test, blurred, conflict)
            tokens = read_json(arm_dir / "counts.json")["supervised_tokens"]
            rows.append({"variant": variant, "seed": seed, **acc, "supervised_tokens": tokens})
    write_table(ctx.out_dir / "accuracy.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    vig_summary = read_json(ctx.inputs["score_vig"] / "vig_summary.json")
    summary, criteria = judge(rows, vig_summary, cfg.claims, cfg.seeds)
    write_json_atomic(ctx.out_dir / "claims.json", {"summary": summary, "criteria": criteria})
    plot(rows, ctx.out_dir / "accuracy_vs_tokens.png")
    flat = {k: v for k, v in summary.items() if isinstance(v, (int, float))}
    ctx.write_metrics({**flat, **{k: float(v) for k, v in criteria.items()},
                       "criteria_pass": float(all(criteria.values()))})


METRICS = ("acc_conflict_image", "acc_aligned_image", "acc_conflict_blur", "acc_aligned_blur",
           "blur_gap_conflict", "supervised_tokens")


def judge(rows: list[dict], vig_summary: dict, claims, seeds: list[int]) -> tuple[dict, dict]:
    """Means over seeds per arm, paired VIG-minus-baseline differences, and the pass criteria."""
    by = lambda variant, key: [r[key] for s in seeds for r in rows if r["variant"] == variant and r["seed"] == s]
    variants = sorted({r["variant"] for r in rows})
    summary: dict = {f"{v}_{k}": summarize(by(v, k))["mean"] for v in variants for k in METRICS}
    summary.update(vig_summary)
    criteria = {
        "a_match_gt_partial_gt_0_gt_conflict": bool(
            vig_summary["vig_match"] > vig_summary["vig_partial"] > 0 > vig_summary["vig_conflict"]),
        "a_grounded_tokens_dominate": bool(vig_summary["d_grounded_mean"] > 0 and
                                           vig_summary["grounded_over_template"] >= claims.grounded_ratio_min),
    }
    if {"vig", "vanilla"} <= set(variants):
        gain = paired_difference(by("vig", "acc_conflict_image"), by("vanilla", "acc_conflict_image"))
        aligned = paired_difference(by("vig", "acc_aligned_image"), by("vanilla", "acc_aligned_image"))
        gap = paired_difference(by("vig", "blur_gap_conflict"), by("vanilla", "blur_gap_conflict"))
        token_ratio = summary["vig_supervised_tokens"] / summary["vanilla_supervised_tokens"]
        summary.update(vig_minus_vanilla_conflict=gain["mean"], vig_minus_vanilla_aligned=aligned["mean"],
                       vig_minus_vanilla_blur_gap=gap["mean"], token_ratio_vig_over_vanilla=token_ratio,
                       vig_minus_vanilla_conflict_wins=gain["wins"])
        criteria["b_beats_vanilla_on_conflict"] = gain["mean"] >= claims.conflict_gain_pts
        criteria["b_aligned_within_tolerance"] = aligned["mean"] >= -claims.aligned_tolerance_pts
        criteria["b_fewer_tokens"] = token_ratio <= claims.token_fraction_max
        criteria["c_larger_blur_gap"] = gap["mean"] >= claims.blur_gap_gain_pts
    if {"vig", "random"} <= set(variants):
        gain = paired_difference(by("vig", "acc_conflict_image"), by("random", "acc_conflict_image"))
        summary.update(vig_minus_random_conflict=gain["mean"], vig_minus_random_conflict_wins=gain["wins"])
        criteria["b_beats_random_on_conflict"] = gain["mean"] >= claims.random_gain_pts
    return summary, {k: bool(v) for k, v in criteria.items()}


def plot(rows: list[dict], path) -> None:
    """Accuracy on bias-conflicting questions vs supervised tokens, one point per arm and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for variant in sorted({r["variant"] for r in rows}):
        pts = [(r["supervised_tokens"], r["acc_conflict_image"]) for r in rows if r["variant"] == variant]
        ax.scatter(*zip(*pts), label=variant)
    ax.set_xlabel("supervised answer tokens")
    ax.set_ylabel("acc. bias-conflicting (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
