"""Score VIG with the reference model and turn the scores into a selection.

Selection (the paper's recipe as we read it): rank the multimodal samples by sample VIG, keep the
top p %; the VIG of the last kept sample, tau_p, is re-used as a token threshold, so inside kept
samples only tokens with d_t >= tau_p are supervised. Text-only samples keep every token.
"""
from __future__ import annotations

import numpy as np
import torch

from components.common.io import load_torch, read_table, save_torch, write_json_atomic, write_table
from components.vig import llava
from components.vig.data import COLORS, GROUNDED_WORDS, VOCAB, WORD_ID, blur
from components.vig.model import sample_vig, token_vig
from components.vig.train import answer_weights, kinds_of, load_split, new_model


def load_reference(cfg, ctx):
    model = new_model(cfg)
    model.load_state_dict(load_torch(ctx.inputs["train_reference"] / "model.pt"))
    return model.eval()


def top_fraction(scores: np.ndarray, percent: float) -> np.ndarray:
    """Boolean mask of exactly round(percent % * n) highest scores (ties: lower index first)."""
    n_keep = int(round(percent / 100 * len(scores)))
    order = np.lexsort((np.arange(len(scores)), -scores))
    keep = np.zeros(len(scores), dtype=bool)
    keep[order[:n_keep]] = True
    return keep


def select_tokens(d: torch.Tensor, answer: torch.Tensor, vig: np.ndarray, multimodal: np.ndarray,
                  percent: float) -> tuple[torch.Tensor, float, np.ndarray]:
    """Per-token training weights, tau_p and the kept-sample mask (see module docstring)."""
    keep_mm = np.zeros(len(vig), dtype=bool)
    keep_mm[np.flatnonzero(multimodal)[top_fraction(vig[multimodal], percent)]] = True
    tau = float(vig[keep_mm].min()) if keep_mm.any() else float("inf")
    token_ok = (d >= tau).float() * answer
    weights = torch.zeros_like(answer)
    weights[torch.from_numpy(keep_mm)] = token_ok[torch.from_numpy(keep_mm)]
    weights[torch.from_numpy(~multimodal)] = answer[torch.from_numpy(~multimodal)]
    return weights, tau, keep_mm


def score_vig_stage(cfg, ctx) -> None:
    if llava.is_paper(cfg):
        return llava.score_vig_stage(cfg, ctx)
    torch.set_num_threads(1)
    data_dir = ctx.inputs["prepare_data"]
    model = load_reference(cfg, ctx)
    split = load_split(data_dir, "train")
    blurred = blur(split["images"], cfg.vig.blur_sigma_frac)
    l_img, l_blur, d = token_vig(model, split["images"], blurred, split["tokens"])
    answer = answer_weights(split)
    vig = sample_vig(d, answer).numpy()
    save_torch(ctx.out_dir / "vig.pt", {"d": d, "l_img": l_img, "l_blur": l_blur, "sample_vig": vig})
    write_table(ctx.out_dir / "vig_samples.parquet",
                {"id": list(range(len(vig))), "kind": kinds_of(data_dir).tolist(), "vig": vig.tolist()})
    write_table(ctx.out_dir / "vig_tokens.parquet", token_table(split, l_img, l_blur, d))
    probes = probe_vig(model, load_split(data_dir, "probes"), cfg.vig.blur_sigma_frac)
    token_stats = grounded_token_stats(split, d, kinds_of(data_dir))
    write_json_atomic(ctx.out_dir / "vig_summary.json", {**probes, **token_stats})
    ctx.write_metrics({**probes, **token_stats, **kind_means(vig, kinds_of(data_dir)),
                       **colour_token_vig(split, d), **reference_premise(cfg, model, data_dir)})


def reference_premise(cfg, model, data_dir) -> dict:
    """The scorer's own premise, on the validation split: with a blurred image it should fall
    back to the noun's prior colour (so that d_t measures what the image adds to the prior)."""
    from components.vig.evaluate import colour_report, nouns_of

    report = colour_report(model, load_split(data_dir, "val"), nouns_of(data_dir, "val"), cfg.vig.blur_sigma_frac)
    return {f"ref_val_{k}": v for k, v in report["metrics"].items()}


def colour_token_vig(split, d) -> dict:
    """Mean d_t of each colour word where it is an answer token (a colour whose d_t is ~0 would be
    masked out of the VIG arm's supervision altogether)."""
    answer, targets = split["supervised"][:, 1:], split["tokens"][:, 1:]
    return {f"d_mean_{c}": float(d[answer & (targets == WORD_ID[c])].mean()) for c in COLORS}


def token_table(split, l_img, l_blur, d) -> dict:
    """Answer tokens only: (sample, position, word, l_img, l_blur, d_t)."""
    answer = split["supervised"][:, 1:]
    rows, cols = torch.nonzero(answer, as_tuple=True)
    words = split["tokens"][:, 1:][rows, cols]
    return {"id": rows.tolist(), "pos": cols.tolist(), "word": [VOCAB[w] for w in words.tolist()],
            "l_img": l_img[rows, cols].tolist(), "l_blur": l_blur[rows, cols].tolist(),
            "d": d[rows, cols].tolist()}


def grounded_token_stats(split, d, kinds) -> dict:
    """Mean d_t of colour / position words vs the other answer tokens of image samples."""
    answer = split["supervised"][:, 1:] & torch.from_numpy(kinds != "text")[:, None]
    grounded = split["grounded"][:, 1:] & answer
    template = answer & ~grounded
    g, t = float(d[grounded].mean()), float(d[template].mean())
    color_ids = torch.tensor([VOCAB.index(w) for w in sorted(GROUNDED_WORDS)])
    assert bool(torch.isin(split["tokens"][:, 1:][grounded], color_ids).all())
    return {"d_grounded_mean": g, "d_template_mean": t,
            "grounded_over_template": g / max(abs(t), 1e-6)}


def probe_vig(model, probes: dict, sigma_frac: float) -> dict:
    """Sample VIG of one fixed caption under matching / partially matching / conflicting images."""
    answer = probes["supervised"][:, 1:].float()
    out = {}
    for kind in ("match", "partial", "conflict"):
        images = probes[f"images_{kind}"]
        # the blurred control is the blurred *matching* image for every row (same no-vision baseline)
        _, _, d = token_vig(model, images, blur(probes["images_match"], sigma_frac), probes["tokens"])
        out[f"vig_{kind}"] = float(sample_vig(d, answer).mean())
    return out


def kind_means(vig: np.ndarray, kinds: np.ndarray) -> dict:
    return {f"vig_mean_{k}": float(vig[kinds == k].mean()) for k in sorted(set(kinds)) if k != "text"}


def select_stage(cfg, ctx) -> None:
    data_dir = ctx.inputs["prepare_data"]
    split, kinds = load_split(data_dir, "train"), kinds_of(data_dir)
    scores = load_torch(ctx.inputs["score_vig"] / "vig.pt")
    answer = answer_weights(split)
    weights, tau, keep = select_tokens(scores["d"], answer, scores["sample_vig"], kinds != "text",
                                       cfg.vig.keep_percent)
    save_torch(ctx.out_dir / "selection.pt", {"weights": weights, "tau": tau, "keep": keep})
    write_table(ctx.out_dir / "selection.parquet",
                {"id": list(range(len(kinds))), "kind": kinds.tolist(), "kept": keep.tolist(),
                 "supervised_tokens": weights.sum(1).tolist()})
    common = {"tau": tau, "kept_multimodal": int(keep.sum()), "token_fraction": float(weights.sum() / answer.sum())}
    samples = read_table(data_dir / "train_samples.parquet")
    if "conflict" not in samples.column_names:   # LLaVA-665K (paper): no generated colours / conflict labels
        return ctx.write_metrics(common)
    kept_by_kind = {f"kept_frac_{k}": float(keep[kinds == k].mean()) for k in sorted(set(kinds)) if k != "text"}
    conflict = np.asarray(samples.column("conflict").to_pylist())
    mm = kinds != "text"
    # which samples VIG prefers: bias-conflicting scenes should be kept more often
    kept_by_kind.update(kept_frac_conflict=float(keep[mm & conflict].mean()),
                        kept_frac_aligned=float(keep[mm & ~conflict].mean()))
    ctx.write_metrics({**common, **kept_by_kind, **colour_tokens_kept(split, weights)})


def colour_tokens_kept(split, weights) -> dict:
    """Share of each colour word's answer occurrences that stay supervised, and the smallest."""
    answer, targets = split["supervised"][:, 1:], split["tokens"][:, 1:]
    out = {}
    for c in COLORS:
        where = answer & (targets == WORD_ID[c])
        out[f"colour_kept_{c}"] = float((weights[where] > 0).float().mean())
    out["colour_kept_min"] = min(out.values())
    return out
