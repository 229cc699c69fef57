"""Stage: Recall@{1,2,5,10}, MRR@10, reader calls / tokens / latency per query, the pass
criteria of CLAIMS.md (mean over corpus seeds), and a plot."""
from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from components.common.io import read_table, write_json_atomic, write_table

KS = (1, 2, 5, 10)
COST_COLUMNS = ("tokens_in", "tokens_out", "usd")


def recall_at(ranked: list[int], relevant: set[int], k: int) -> float:
    """LILaC's definition: a hit if at least one relevant component is in the top k."""
    return float(any(c in relevant for c in ranked[:k]))


def mrr_at(ranked: list[int], relevant: set[int], k: int = 10) -> float:
    for i, c in enumerate(ranked[:k]):
        if c in relevant:
            return 1.0 / (i + 1)
    return 0.0


LADDER_RUNG = {(1, "none"): 0, (2, "none"): 1, (2, "comp"): 2, (2, "both"): 3}


def firing_counts(trace: list[dict]) -> dict[str, float]:
    """How often the policy backtracked, climbed the cost ladder (a higher rung than the
    previous attempt at the same hop) and widened the scope (local -> global at the same hop)."""
    backtracks = escalations = widenings = 0
    prev = None
    for t in trace:
        if t["action"] == "BACKTRACK":
            backtracks, prev = backtracks + 1, None
        elif t["action"] == "TRAVERSE":
            s = t["strategy"]
            cur = (t["hop"], LADDER_RUNG.get((s["granularity"], s["llm"]), 0), s["scope"])
            if prev and prev[0] == cur[0]:
                escalations += cur[1] > prev[1]
                widenings += prev[2] == "local" and cur[2] == "global"
            prev = cur
    return {"backtracks": backtracks, "escalations": escalations, "widenings": widenings,
            "backtracked": float(backtracks > 0)}


def score_runs(runs: dict, qrels: dict[str, set[int]]) -> dict[str, dict[str, float]]:
    """Per method: mean metrics in percent (recall, MRR), mean cost per query, and how often
    backtracking and escalation fired (per query; ``backtracked`` = share of queries, %)."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    n = len(runs["qid"])
    traces = runs.get("trace", ["[]"] * n)
    near = runs.get("near_misses", [0] * n)
    cost = [k for k in COST_COLUMNS if k in runs]  # an endpoint reader's token split and $
    for i, (m, qid, ranked, calls, tokens, lat, tr, nm) in enumerate(zip(
            runs["method"], runs["qid"], runs["ranked"], runs["calls"], runs["tokens"], runs["latency_s"],
            traces, near)):
        rel = qrels[qid]
        for key in cost:
            acc[m][key].append(runs[key][i])
        for key, v in firing_counts(json.loads(tr) if isinstance(tr, str) else tr).items():
            acc[m][key].append(100 * v if key == "backtracked" else v)
        acc[m]["near_misses"].append(nm)
        for k in KS:
            acc[m][f"R@{k}"].append(100 * recall_at(list(ranked), rel, k))
        acc[m]["MRR@10"].append(100 * mrr_at(list(ranked), rel))
        acc[m]["calls"].append(calls), acc[m]["tokens"].append(tokens), acc[m]["latency_s"].append(lat)
    return {m: {k: float(np.mean(v)) for k, v in d.items()} for m, d in acc.items()}


def criteria(mean: dict[str, dict[str, float]], per_seed: list[dict]) -> dict[str, float]:
    r = lambda m: mean[m]["R@10"]  # noqa: E731
    out = {
        "G1_fif_minus_lilac": r("fif") - r("lilac_like"),
        "G1_fif_minus_ircot": r("fif") - r("ircot_like"),
        "G2_recall_loss_no_backtrack": r("fif") - r("fif_no_backtrack"),
        "G2_calls_no_backtrack_over_fif": mean["fif_no_backtrack"]["calls"] / max(mean["fif"]["calls"], 1e-9),
        "G3_token_ratio_fif_over_max": mean["fif"]["tokens"] / max(mean["always_max"]["tokens"], 1e-9),
        "G3_recall_gap_max_minus_fif": r("always_max") - r("fif"),
    }
    out["G1_pass"] = float(out["G1_fif_minus_lilac"] >= 5 and out["G1_fif_minus_ircot"] >= 3)
    out["G2_pass"] = float(out["G2_recall_loss_no_backtrack"] >= 2 and out["G2_calls_no_backtrack_over_fif"] > 1)
    out["G3_pass"] = float(out["G3_token_ratio_fif_over_max"] <= 0.6 and out["G3_recall_gap_max_minus_fif"] <= 3)
    for tag in sorted({m.split("@")[1] for m in mean if "@" in m}):
        f, l, i = (mean.get(f"{m}@{tag}", {}).get("R@10") for m in ("fif", "lilac_like", "ircot_like"))
        if None not in (f, l, i):
            out[f"G1_{tag}_fif_minus_lilac"], out[f"G1_{tag}_fif_minus_ircot"] = f - l, f - i
    out["G1_seeds_pass"] = float(sum(s["fif"]["R@10"] - s["lilac_like"]["R@10"] >= 5 and
                                     s["fif"]["R@10"] - s["ircot_like"]["R@10"] >= 3 for s in per_seed))
    return out


def _score_seed(ctx, seed: int) -> dict[str, dict[str, float]]:
    runs = read_table(ctx.inputs["retrieve"][str(seed)] / "runs.parquet").to_pydict()
    corpus = ctx.inputs["build_corpus"][str(seed)]
    scores = score_runs(runs, qrels_by_query(read_table(corpus / "qrels.parquet").to_pydict()))
    if (corpus / "answers.parquet").is_file():   # a benchmark with gold answers: QA EM/F1 of the generator
        from components.fif.qa import answers_by_query, qa_scores

        for m, d in qa_scores(runs, answers_by_query(read_table(corpus / "answers.parquet").to_pydict())).items():
            scores[m].update(d)
    return scores


def qrels_by_query(qrels_t: dict) -> dict[str, set[int]]:
    """Every relevant component of a query (a benchmark may list several; R@k needs one)."""
    out: dict[str, set[int]] = {}
    for q, c in zip(qrels_t["qid"], qrels_t["comp_id"]):
        out.setdefault(q, set()).add(int(c))
    return out


def premise(dev: list[dict]) -> dict[str, float]:
    """Premise quantities, on the dev seeds only: without backtracking FiF must leave room to
    recover (R@10 < 90), and content-dependent reader errors must actually occur."""
    if not dev:
        return {}
    mean = lambda m, k: float(np.mean([s[m][k] for s in dev]))  # noqa: E731
    return {"dev_fif_no_backtrack_R10": mean("fif_no_backtrack", "R@10"), "dev_fif_R10": mean("fif", "R@10"),
            "dev_fif_near_misses": mean("fif", "near_misses"), "dev_fif_backtracked": mean("fif", "backtracked")}


def evaluate_stage(cfg, ctx) -> None:
    dev = [_score_seed(ctx, s) for s in cfg.dev_seeds]
    per_seed = [_score_seed(ctx, s) for s in cfg.seeds]
    methods = list(per_seed[0])
    keys = list(dict.fromkeys(k for m in methods for k in per_seed[0][m]))  # QA keys: generator methods only
    mean = {m: {k: float(np.mean([s[m][k] for s in per_seed])) for k in per_seed[0][m]} for m in methods}
    std = {m: {k: float(np.std([s[m][k] for s in per_seed])) for k in per_seed[0][m]} for m in methods}
    table = {"method": methods, **{k: [mean[m].get(k, np.nan) for m in methods] for k in keys},
             **{f"{k}_std": [std[m].get(k, np.nan) for m in methods] for k in keys}}
    write_table(ctx.out_dir / "results.parquet", table)
    crit = {**criteria(mean, per_seed), **premise(dev)}
    write_json_atomic(ctx.out_dir / "results.json", {"mean": mean, "std": std, "per_seed": per_seed, "dev": dev,
                                                     "criteria": crit})
    _plot(ctx.out_dir / "recall_vs_tokens.png", mean)
    ctx.log_artifact(ctx.out_dir / "recall_vs_tokens.png")
    flat = {f"{m}/{k}": v for m, d in mean.items() for k, v in d.items() if k in FLAT_KEYS}
    ctx.write_metrics({**flat, **crit})


FLAT_KEYS = ("R@10", "MRR@10", "calls", "tokens", "backtracks", "escalations", "widenings", "near_misses",
             *COST_COLUMNS, "EM", "F1", "qa_calls", "qa_tokens")


def _plot(path, mean) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, d in mean.items():
        if "@" in m:
            continue
        ax.scatter(d["tokens"], d["R@10"])
        ax.annotate(m, (d["tokens"], d["R@10"]), fontsize=7)
    ax.set_xlabel("reader tokens / query")
    ax.set_ylabel("R@10 (%)")
    ax.set_xscale("symlog")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
