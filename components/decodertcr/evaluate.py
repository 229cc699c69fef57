"""Scoring (masked-peptide PLL), discrimination metrics, design generation and its evaluation."""
from __future__ import annotations

import numpy as np
import torch

from components.common.io import load_torch, read_json, read_table, write_json_atomic, write_table
from components.common.metrics import auroc, summarize
from components.common.seeds import seed_everything
from components.decodertcr.corpus import energy, log10_pgen
from components.decodertcr.decoding import design
from components.decodertcr.model import masked_peptide_pll, positionwise_pll
from components.decodertcr.tokens import REGION_CDR3, decode_region, encode, sequence_width
from components.decodertcr.train import new_model

EVAL_SPLITS = ("test_tcr", "test_epitope", "test_random", "val")


def load_model(cfg, path) -> torch.nn.Module:
    model = new_model(cfg)
    model.load_state_dict(load_torch(path / "model.pt"))
    return model.eval()


def score_stage(cfg, ctx) -> None:
    """Every model of one seed (all variants and binder caps) in one instance: scoring takes
    about a second per model, less than the runtime's cost of a stage instance of its own."""
    torch.set_num_threads(1)
    seed = ctx.item["seed"]
    tokens = load_torch(ctx.inputs["tokenize"] / "tokens.pt")
    paired = read_table(ctx.inputs["build_paired"] / "paired.parquet").to_pandas()
    oracle = load_oracle(ctx.inputs["build_paired"])
    metrics = {}
    for key in sorted(k for k in ctx.inputs["train_paired"] if k.rsplit("-", 1)[1] == str(seed)):
        variant = key.rsplit("-", 2)[0]
        model = load_model(cfg, ctx.inputs["train_paired"][key])
        scores, probe = score_model(cfg, model, variant, seed, tokens, paired, oracle)
        model_key = key.rsplit("-", 1)[0]                       # <variant>-<binders>
        write_table(ctx.out_dir / model_key / "scores.parquet", scores)
        write_json_atomic(ctx.out_dir / model_key / "probe.json", probe)
        metrics.update({f"{model_key}/mean_pll_{s}": float(g["pll"].mean())
                        for s, g in scores.groupby("split")})
        metrics.update({f"{model_key}/{k}": v for k, v in probe.items()})
    ctx.write_metrics(metrics)


def score_model(cfg, model, variant: str, seed: int, tokens: dict, paired, oracle):
    """Masked-peptide PLL of every evaluation pair (plus the training pairs and the
    compatibility probe for the marginal-only model, which saw no pair)."""
    import pandas as pd

    splits = EVAL_SPLITS + (("train",) if variant == "marginal_only" else ())
    probe = {}
    if variant == "marginal_only" and oracle is not None:
        cdr3s = sorted(set(paired.loc[paired["split"].isin(["train", "val"]), "cdr3"]))
        probe = {f"probe_{k}": v for k, v in
                 compatibility_probe(model, cdr3s, oracle["matrix"], sequence_width(cfg)).items()}
        seed_everything(seed)          # the same initial weights S1 started from
        probe.update({f"probe_init_{k}": v for k, v in
                      compatibility_probe(new_model(cfg).eval(), cdr3s, oracle["matrix"],
                                          sequence_width(cfg)).items()})
    parts = []
    for split in splits:
        rows = paired[paired["split"] == split].copy()  # same order as tokenize's split tensors
        if split not in tokens or rows.empty:
            continue
        rows["pll"] = masked_peptide_pll(model, *tokens[split]).numpy()
        parts.append(rows[["split", "epitope_id", "tcr_id", "kind", "label", "pll"]])
    return pd.concat(parts, ignore_index=True), probe


def model_score_dirs(score_inputs: dict) -> dict:
    """``{<variant>-<binders>-<seed>: folder}`` from the per-seed score outputs."""
    return {f"{sub.name}-{seed}": sub for seed, path in score_inputs.items()
            for sub in sorted(p for p in path.iterdir() if p.is_dir())}


PROBE_PEPTIDES = 400                   # fresh anchor-motif 9-mers for the peptide probe
PROBE_SEED = 20_260_101                # their rng (fixed: the probe reads no data params)


@torch.no_grad()
def compatibility_probe(model, cdr3s: list[str], matrix: np.ndarray, width: int) -> dict[str, float]:
    """Has a model learned the residue compatibility within a chain? For each single chain
    (a CDR3 alone; an anchor-motif peptide alone) mask the centre of its contact region (CDR3
    middle residue 3 of 5; peptide P6) and correlate the 20 predicted logits with
    sum_k M[a, context_k] over the other four contact residues; mean over sequences."""
    from components.decodertcr.corpus import (AA_INDEX, CDR3_MIDDLE, PEP_CONTACT,
                                              sample_peptides)
    from components.decodertcr.tokens import MASK, REGION_PEPTIDE, encode_many

    peptides = sample_peptides(PROBE_PEPTIDES, np.random.default_rng(PROBE_SEED))
    out = {}
    for chain, seqs in (("tcr", cdr3s), ("pep", peptides)):
        is_pep = chain == "pep"
        tok, reg = encode_many(seqs if is_pep else [""] * len(seqs),
                               [""] * len(seqs) if is_pep else seqs, width)
        region = REGION_PEPTIDE if is_pep else REGION_CDR3
        first = (reg == region).int().argmax(1)                 # first residue of the chain
        start = [int(PEP_CONTACT[0]) if is_pep else (len(q) - CDR3_MIDDLE) // 2 for q in seqs]
        centre = torch.tensor([f + st + 2 for f, st in zip(first.tolist(), start)])
        x = tok.clone()
        rows = torch.arange(len(seqs))
        x[rows, centre] = MASK
        logits = torch.cat([model(x[i:i + 512])[torch.arange(min(512, len(seqs) - i)),
                                                centre[i:i + 512]] for i in range(0, len(seqs), 512)])
        compat = np.stack([matrix[:, [AA_INDEX[q[st + k]] for k in (0, 1, 3, 4)]].sum(1)
                           for q, st in zip(seqs, start)])                     # (N, 20)
        a = logits.numpy() - logits.numpy().mean(1, keepdims=True)
        b = compat - compat.mean(1, keepdims=True)
        corr = (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1) + 1e-12)
        out[f"corr_{chain}"] = float(corr.mean())
    out["corr"] = (out["corr_tcr"] + out["corr_pep"]) / 2
    return out


def per_epitope_auroc(frame) -> dict[int, float]:
    """AUROC of the PLL per epitope, only epitopes with both classes (as the official code)."""
    out = {}
    for e, g in frame.groupby("epitope_id"):
        if g["label"].nunique() == 2:
            out[int(e)] = auroc(g["pll"].to_numpy(), g["label"].to_numpy())
    return out


def per_epitope_table(score_dirs: dict):
    """AUROC of every (split, variant, binder cap, seed, epitope) with both classes."""
    import pandas as pd

    rows = []
    for key, path in score_dirs.items():
        variant, binders, seed = key.rsplit("-", 2)
        scores = read_table(path / "scores.parquet").to_pandas()
        for split, frame in scores.groupby("split"):
            for e, value in per_epitope_auroc(frame).items():
                rows.append({"split": split, "variant": variant, "binders": int(binders),
                             "seed": int(seed), "epitope_id": e, "auroc": value,
                             "n_pairs": int((frame["epitope_id"] == e).sum())})
    columns = ["split", "variant", "binders", "seed", "epitope_id", "auroc", "n_pairs"]
    return pd.DataFrame(rows, columns=columns).sort_values(columns[:5])


def discrimination_rows(variant: str, binders: int, seed: int, scores) -> list[dict]:
    from sklearn.metrics import average_precision_score

    rows = []
    for split, frame in scores.groupby("split"):
        per_epi = per_epitope_auroc(frame)
        pos = frame[frame["label"] == 1]
        by_kind = {k: auroc(np.r_[pos["pll"], g["pll"]], np.r_[np.ones(len(pos)), np.zeros(len(g))])
                   for k, g in frame[frame["label"] == 0].groupby("kind")}
        rows.append({"variant": variant, "binders": binders, "seed": seed, "split": split,
                     "macro_auroc": float(np.mean(list(per_epi.values()))) if per_epi else float("nan"),
                     "n_epitopes": len(per_epi),
                     "auprc": float(average_precision_score(frame["label"], frame["pll"])),
                     "auroc_vs_swapped": by_kind.get("swapped", float("nan")),
                     "auroc_vs_background": by_kind.get("background", float("nan"))})
    return rows


def evaluate_discrimination_stage(cfg, ctx) -> None:
    import pandas as pd

    score_dirs = model_score_dirs(ctx.inputs["score"])
    rows = []
    for key, path in score_dirs.items():
        variant, binders, seed = key.rsplit("-", 2)
        rows += discrimination_rows(variant, int(binders), int(seed),
                                    read_table(path / "scores.parquet").to_pandas())
    table = pd.DataFrame(rows).sort_values(["split", "variant", "binders", "seed"])
    write_table(ctx.out_dir / "discrimination.parquet", table)
    write_table(ctx.out_dir / "per_epitope.parquet", per_epitope_table(score_dirs))
    metrics = {}
    for (split, variant, binders), g in table.groupby(["split", "variant", "binders"]):
        metrics[f"{split}/{variant}/b{binders}/macro_auroc"] = float(g["macro_auroc"].mean())
        metrics[f"{split}/{variant}/b{binders}/auprc"] = float(g["auprc"].mean())
    for split, g in table[table["variant"] == "marginal_only"].groupby("split"):
        # the S1 model never sees a binder, so its score does not depend on the cap
        metrics[f"{split}/marginal_only/macro_auroc"] = float(g["macro_auroc"].mean())
    metrics.update(premise_metrics(score_dirs))
    ctx.write_metrics(metrics)


def premise_metrics(score_dirs: dict) -> dict[str, float]:
    """The marginal-only model per seed (one binder cap: S1 never sees a binder): zero-shot
    macro AUROC on the train + validation pairs, and its compatibility probe beside the probe
    of the same initial weights."""
    import pandas as pd

    first_cap = {}
    for key in sorted(score_dirs):
        variant, binders, seed = key.rsplit("-", 2)
        if variant == "marginal_only":
            first_cap.setdefault(int(seed), score_dirs[key])
    if not first_cap:
        return {}
    aurocs, probes = [], []
    for seed, path in sorted(first_cap.items()):
        scores = read_table(path / "scores.parquet").to_pandas()
        pooled = scores[scores["split"].isin(["train", "val"])].assign(split="train_val")
        aurocs.append(discrimination_rows("marginal_only", 0, seed, pooled)[0]["macro_auroc"])
        probe_file = path / "probe.json"
        probes.append(read_json(probe_file) if probe_file.is_file() else {})
    out = {"premise/marginal_only/train_val_macro_auroc": float(np.mean(aurocs))}
    for k in probes[0]:
        out[f"premise/marginal_only/{k}"] = float(pd.Series([p[k] for p in probes]).mean())
    return out


# ---------------------------------------------------------------- generation
def design_targets(paired, g, data_seed: int) -> list[tuple[int, str, str]]:
    """(epitope id, epitope, template CDR3): seen epitopes x unseen background TCRs."""
    rng = np.random.default_rng(data_seed + 11)
    seen = sorted(paired.loc[paired["split"] == "train", "epitope_id"].unique())[:g.n_epitopes]
    templates = paired.loc[(paired["split"] == "test_tcr") & (paired["kind"] == "background"), "cdr3"]
    templates = sorted(set(templates))
    out = []
    for e in seen:
        epitope = paired.loc[paired["epitope_id"] == e, "epitope"].iloc[0]
        for i in rng.choice(len(templates), size=min(g.templates_per_epitope, len(templates)),
                            replace=False):
            out.append((int(e), epitope, templates[i]))
    return out


def generation_model_key(cfg, seed: int) -> str:
    """The curriculum model trained on the most binders."""
    variant = "curriculum" if "curriculum" in cfg.train.variants else cfg.train.variants[0]
    return f"{variant}-{max(cfg.train.binders_per_epitope)}-{seed}"


def generate_stage(cfg, ctx) -> None:
    """Redesign the CDR3 middle (germline ends kept) for seen epitopes with each decoder."""
    torch.set_num_threads(1)
    seed, g = ctx.item["seed"], cfg.generate
    seed_everything(seed)
    model = load_model(cfg, ctx.inputs["train_paired"][generation_model_key(cfg, seed)])
    paired = read_table(ctx.inputs["build_paired"] / "paired.parquet").to_pandas()
    oracle = load_oracle(ctx.inputs["build_paired"])
    targets = design_targets(paired, g, cfg.data.seed)
    width = sequence_width(cfg)
    rows = []
    for n, (e, epitope, template) in enumerate(targets):
        tokens, region = (torch.tensor(v) for v in encode(epitope, template, width))
        cdr3_pos = torch.nonzero(region == REGION_CDR3).flatten().tolist()
        positions = cdr3_pos[g.keep_ends:len(cdr3_pos) - g.keep_ends]
        for m, method in enumerate(g.methods):
            x = design(method, model, tokens, positions, g, seed=seed * 100_003 + n * 7 + m)
            cdr3 = decode_region(x, region, REGION_CDR3)
            rows.append({"seed": seed, "method": method, "epitope_id": e, "template": template,
                         "cdr3": cdr3, **oracle_scores(cdr3, e, epitope, oracle),
                         "model_pll": positionwise_pll(model, x, positions)})
        ctx.progress(n + 1, len(targets), "designing")
    import pandas as pd

    frame = pd.DataFrame(rows)
    write_table(ctx.out_dir / "designs.parquet", frame)
    keys = ("energy_percentile", "model_pll", "hit") if oracle else ("model_pll",)
    ctx.write_metrics({f"{m}/{k}": float(grp[k].mean()) for m, grp in frame.groupby("method")
                       for k in keys})


def load_oracle(build_paired_dir) -> dict | None:
    """The planted world's hidden energy; published tables have none (None)."""
    path = build_paired_dir / "oracle.pt"
    return load_torch(path) if path.is_file() else None


def oracle_scores(cdr3: str, e: int, epitope: str, oracle: dict | None) -> dict:
    """Energy, its percentile over the pool and binder hit of a design (NaN without an oracle)."""
    if oracle is None:
        return {"energy": float("nan"), "energy_percentile": float("nan"), "hit": float("nan")}
    e_value = float(energy([cdr3], epitope, oracle)[0])
    return {"energy": e_value,
            "energy_percentile": float(100 * (oracle["pool_energy"][e] < e_value).mean()),
            "hit": bool(e_value >= oracle["binder_threshold"][e])}


def aa_composition_kl(seqs: list[str], reference: list[str]) -> float:
    def freqs(ss):
        counts = np.ones(20)
        for s in ss:
            for a in s:
                counts["ACDEFGHIKLMNPQRSTVWY".index(a)] += 1
        return counts / counts.sum()

    p, q = freqs(seqs), freqs(reference)
    return float((p * np.log(p / q)).sum())


def evaluate_generation_stage(cfg, ctx) -> None:
    import pandas as pd

    g = cfg.generate
    torch.set_num_threads(1)
    frame = pd.concat([read_table(p / "designs.parquet").to_pandas()
                       for p in ctx.inputs["generate"].values()], ignore_index=True)
    pool = read_table(ctx.inputs["build_paired"] / "pool.parquet").column("cdr3").to_pylist()
    real = pool[:g.n_pgen_real]
    real_pgen = log10_pgen(real)
    oracle = load_oracle(ctx.inputs["build_paired"])
    metrics = {"real/log10_pgen": float(real_pgen.mean())}
    if oracle is not None:
        templates = frame.drop_duplicates(["epitope_id", "template"])
        template_pct = [100 * (oracle["pool_energy"][e] < energy([t], oracle["epitopes"][e], oracle)[0]).mean()
                        for e, t in zip(templates["epitope_id"], templates["template"])]
        metrics["template/energy_percentile"] = float(np.mean(template_pct))
    per_seed = []
    for (method, seed), grp in frame.groupby(["method", "seed"]):
        pgen = log10_pgen(grp["cdr3"].tolist()[:g.n_pgen])
        finite = pgen[pgen > -300]
        per_seed.append({"method": method, "seed": int(seed),
                         "energy_percentile": grp["energy_percentile"].mean(),
                         "model_pll": grp["model_pll"].mean(), "hit_rate": grp["hit"].mean(),
                         "log10_pgen": float(finite.mean()) if len(finite) else float("nan"),
                         "pgen_zero_fraction": float((pgen <= -300).mean()),
                         "unique_fraction": grp["cdr3"].nunique() / len(grp),
                         "aa_kl_vs_real": aa_composition_kl(grp["cdr3"].tolist(), pool)})
    table = pd.DataFrame(per_seed)
    write_table(ctx.out_dir / "generation.parquet", table)
    write_json_atomic(ctx.out_dir / "real_pgen.json", {"mean": float(real_pgen.mean()), "n": len(real)})
    for method, grp in table.groupby("method"):
        for k in ("energy_percentile", "model_pll", "hit_rate", "log10_pgen", "pgen_zero_fraction",
                  "unique_fraction", "aa_kl_vs_real"):
            metrics[f"{method}/{k}"] = float(grp[k].mean())
    ctx.write_metrics(metrics)


# ---------------------------------------------------------------- report
def report_stage(cfg, ctx) -> None:
    c = cfg.claims
    disc = read_table(ctx.inputs["evaluate_discrimination"] / "discrimination.parquet").to_pandas()
    gen = read_table(ctx.inputs["evaluate_generation"] / "generation.parquet").to_pandas()
    gen_metrics = load_metrics(ctx.inputs["evaluate_generation"])
    claims: dict = {}
    held_all = disc[disc["split"] == "test_tcr"]
    for cap, frame in held_all.groupby("binders"):
        held = frame.pivot(index="seed", columns="variant", values="macro_auroc")
        if {"curriculum", "paired_only"} <= set(held.columns):
            claims[f"c1_b{cap}"] = curriculum_claim(held, c)
    g = gen.pivot(index="seed", columns="method", values="energy_percentile")
    p = gen.pivot(index="seed", columns="method", values="model_pll")
    if {"iegr", "one_shot"} <= set(g.columns):
        pct_gain = float((g["iegr"] - g["one_shot"]).mean())
        pll_gain = float((p["iegr"] - p["one_shot"]).mean())
        claims["c2"] = {"energy_percentile_gain": pct_gain, "model_pll_gain": pll_gain}
        if np.isfinite(pct_gain):      # gated only where an oracle scores designs
            claims["c2"]["pass"] = bool(pct_gain >= c.min_energy_percentile_gain and pll_gain > 0)
    hit = gen.groupby("method")["hit_rate"].mean().to_dict()
    pgen_gap = abs(gen_metrics.get("iegr/log10_pgen", float("nan")) - gen_metrics["real/log10_pgen"])
    top = held_all[held_all["binders"] == held_all["binders"].max()]
    claims["c3_prediction_generation_gap"] = {
        "test_tcr_macro_auroc": float(top.loc[top["variant"] == "curriculum", "macro_auroc"].mean()),
        "hit_rate_by_method": hit, "iegr_log10_pgen_gap_to_real": pgen_gap,
        "realism_within_bound": bool(pgen_gap <= c.max_log10_pgen_gap), "gated": False}
    write_json_atomic(ctx.out_dir / "claims.json", claims)
    gated = [v["pass"] for k, v in claims.items() if "pass" in v]
    numbers = {f"{k}/{n}": float(x) for k, v in claims.items() for n, x in v.items()
               if isinstance(x, (int, float, bool))}
    ctx.write_metrics({"criteria_passed": int(sum(gated)), "criteria_gated": len(gated), **numbers,
                       "iegr_hit_rate": float(hit.get("iegr", float("nan"))),
                       "iegr_log10_pgen_gap": float(pgen_gap)})


def curriculum_claim(held, c) -> dict:
    """Curriculum vs paired-only at matched paired steps (gated) and at equal total steps
    (reported), from a seed x variant table of held-out-TCR macro AUROC."""
    gain = summarize(held["curriculum"] - held["paired_only"])
    cur = float(held["curriculum"].mean())
    out = {"curriculum_macro_auroc": cur, "paired_only_macro_auroc": float(held["paired_only"].mean()),
           "gain": gain["mean"], "gain_ci_low": gain["ci_low"], "gain_ci_high": gain["ci_high"],
           "pass": bool(gain["mean"] >= c.min_auroc_gain and cur >= c.min_curriculum_auroc)}
    if "paired_only_total" in held.columns:
        out["paired_only_total_macro_auroc"] = float(held["paired_only_total"].mean())
        out["gain_vs_equal_total"] = float((held["curriculum"] - held["paired_only_total"]).mean())
    if "marginal_only" in held.columns:
        out["marginal_only_macro_auroc"] = float(held["marginal_only"].mean())
    return out


def load_metrics(stage_dir) -> dict:
    """Mean log10 Pgen per method and of real OLGA CDR3s, from evaluate_generation's files."""
    gen = read_table(stage_dir / "generation.parquet").to_pandas()
    out = {f"{m}/log10_pgen": float(g["log10_pgen"].mean()) for m, g in gen.groupby("method")}
    out["real/log10_pgen"] = read_json(stage_dir / "real_pgen.json")["mean"]
    return out
