"""Evaluate TriCD, the fixed-perturbation VCD baseline and the ablations on the test split.

Variants (all on the same frozen backbone, same frames and prompt; only the intended
perturbation / re-weighting differs between passes):
- ``base``            plain one-pass decoding
- ``vcd``             VCD: q_o + a2 (q_o - q_n) with one fixed tool (``policy.vcd_tool``)
- ``tricd``           learned router + gater, q_o + a1 (q_p - q_o) + a2 (q_o - q_n)
- ``neg_only``        tricd with a1 = 0 (no positive pathway)
- ``pos_only``        tricd with a2 = 0 (no negative pathway)
- ``random_router``   tools drawn at random, each with the learned router's mean selection rate
                      on val (same positive pathway, same a1, a2)
- ``fixed_best_tool`` one tool for every query: the best single tool on **val**
"""
from __future__ import annotations

import numpy as np
import torch

from components.tricd.decode import calibrate, predict, score
from components.tricd.tools import TOOL_NAMES

VARIANTS = ("base", "vcd", "tricd", "neg_only", "pos_only", "random_router", "fixed_best_tool")
TEMPORAL_TOOLS = ("reverse", "shuffle")


def _one_hot(n: int, tool: str) -> np.ndarray:
    masks = np.zeros((n, len(TOOL_NAMES)), bool)
    masks[:, TOOL_NAMES.index(tool)] = True
    return masks


def temporal_tool_rate(qa, masks: np.ndarray, kind: str) -> float:
    """Share of isolated items of this type for which the router picks reverse or shuffle."""
    cols = [TOOL_NAMES.index(t) for t in TEMPORAL_TOOLS]
    rows = np.array([(not c) and kind in list(t) for c, t in zip(qa.compositional, qa.types)])
    return float(masks[rows][:, cols].any(axis=1).mean()) if rows.any() else float("nan")


def evaluate_stage(cfg, ctx) -> None:
    from components.common.io import load_torch, write_json_atomic, write_table
    from components.tricd.backbones import open_backbone
    from components.tricd.decode import load_split
    from components.tricd.policy import (Policy, build_cache, collapse_stats, negative_logits,
                                         policy_decisions, positive_logits)

    seed = ctx.item["seed"]
    p = cfg.policy
    bench_dir, sal_dir = ctx.inputs["build_benchmark"], ctx.inputs["precompute_saliency"]
    backbone = open_backbone(cfg, ctx.inputs["train_backbone"])
    policy = Policy(backbone, p.d_router, p.n_queries, p.gater_hidden, p.tool_ids, p.tool_id_std)
    policy.load_state_dict(load_torch(ctx.inputs["train_policy"][str(seed)] / "policy.pt"))
    policy.eval()
    gen = torch.Generator().manual_seed(seed)
    caches = {}
    for split in ("val", "test"):
        data = load_split(bench_dir, split, backbone=backbone)
        caches[split] = (data, build_cache(backbone, data, load_torch(f"{sal_dir}/{split}_saliency.pt")))

    def run(cache, masks, beta, a1, a2, q_p=None):
        rows = np.arange(len(cache.text))
        q_n = negative_logits(backbone, cache, rows, masks, p, gen)
        if q_p is None:
            q_p = positive_logits(backbone, cache, rows, beta)
        return calibrate(cache.q_o, q_p, q_n, a1, a2), q_n, q_p

    # val: the learned router's selection rate (for the random router) and the best fixed tool
    val, vcache = caches["val"]
    vprobs, vbeta = policy_decisions(policy, vcache, p.router_threshold)
    rate = float((vprobs > p.router_threshold).float().mean())
    vq_p = positive_logits(backbone, vcache, np.arange(len(vcache.text)), vbeta)
    val_tool_macro = {}
    for tool in TOOL_NAMES:
        q, _, _ = run(vcache, _one_hot(len(vcache.text), tool), vbeta, p.a1, p.a2, vq_p)
        val_tool_macro[tool] = score(val.qa, predict(q.numpy(), vcache.tasks))["macro"]
    best_tool = max(val_tool_macro, key=val_tool_macro.get)

    test, cache = caches["test"]
    n = len(cache.text)
    probs, beta = policy_decisions(policy, cache, p.router_threshold)
    masks = (probs > p.router_threshold).numpy()
    q_p = positive_logits(backbone, cache, np.arange(n), beta)
    q_tricd, q_n, _ = run(cache, masks, beta, p.a1, p.a2, q_p)
    q_vcd, _, _ = run(cache, _one_hot(n, p.vcd_tool), beta, 0.0, p.a2, cache.q_o)
    rnd = np.random.default_rng(cfg.evaluate.random_router_seed + seed).random(masks.shape) < rate
    q_rnd, _, _ = run(cache, rnd, beta, p.a1, p.a2, q_p)
    q_fix, _, _ = run(cache, _one_hot(n, best_tool), beta, p.a1, p.a2, q_p)
    logits = {"base": cache.q_o, "vcd": q_vcd, "tricd": q_tricd,
              "neg_only": calibrate(cache.q_o, cache.q_o, q_n, 0.0, p.a2),
              "pos_only": calibrate(cache.q_o, q_p, cache.q_o, p.a1, 0.0),
              "random_router": q_rnd, "fixed_best_tool": q_fix}
    results, preds = {}, {"qa_id": test.qa.qa_id.tolist(), "answer": test.qa.answer.tolist()}
    for name in VARIANTS:
        pred = predict(logits[name].numpy(), cache.tasks)
        results[name] = score(test.qa, pred)
        preds[name] = pred.tolist()
    write_table(ctx.out_dir / "preds.parquet", preds)
    write_table(ctx.out_dir / "router_test.parquet", {
        "qa_id": test.qa.qa_id.tolist(), "task": test.qa.task.tolist(),
        "types": [list(t) for t in test.qa.types], "beta": beta.tolist(),
        **{f"p_{t}": probs[:, i].tolist() for i, t in enumerate(TOOL_NAMES)}})
    router = {"freq": {t: float(f) for t, f in zip(TOOL_NAMES, masks.mean(0))},
              "n_tools_mean": float(masks.sum(1).mean()), **collapse_stats(masks),
              "beta_mean": float(beta.mean()), "val_selection_rate": rate,
              "temporal_tool_rate_temporal": temporal_tool_rate(test.qa, masks, "temporal"),
              "temporal_tool_rate_attribute": temporal_tool_rate(test.qa, masks, "attribute"),
              "best_tool_on_val": best_tool, "val_tool_macro": val_tool_macro}
    write_json_atomic(ctx.out_dir / "results.json", {"variants": results, "router": router})
    metrics = {f"{v}_macro": results[v]["macro"] for v in VARIANTS}
    metrics.update({f"{v}_compositional": results[v]["compositional"] for v in ("base", "vcd", "tricd")})
    metrics.update({f"{v}_isolated": results[v]["isolated"] for v in ("base", "vcd", "tricd")})
    metrics.update({"temporal_tool_rate_temporal": router["temporal_tool_rate_temporal"],
                    "temporal_tool_rate_attribute": router["temporal_tool_rate_attribute"],
                    "router_n_tools": router["n_tools_mean"], "beta_mean": router["beta_mean"],
                    "router_zero_tool_share": router["zero_tool_share"],
                    "router_all_tools_share": router["all_tools_share"],
                    "router_modal_set_share": router["modal_set_share"], "router_n_tool_sets": router["n_tool_sets"],
                    **{f"router_freq_{t}": f for t, f in router["freq"].items()}})
    ctx.write_metrics(metrics)
