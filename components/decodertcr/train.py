"""Tokenize the corpora and train the masked LMs: marginal pre-training (S1), then the paired
stage per variant and number of training binders per epitope (curriculum continues S1;
paired_only starts from the initial model with the same paired steps, paired_only_total and mixed
with the same total steps; marginal_only is the S1 model untouched; backbone_only is the initial
model untouched: a random init in the synthetic world, the pre-trained ESM-2 in the paper's)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from components.common.io import load_torch, read_table, save_torch
from components.common.seeds import seed_everything
from components.common.train import fit
from components.decodertcr.model import EsmMaskedLM, MaskedLM, mlm_loss, tiny_esm
from components.decodertcr.tokens import encode_many, mask_batch, sequence_width

VARIANTS = ("curriculum", "paired_only", "paired_only_total", "mixed", "marginal_only",
            "backbone_only")


def tokenize_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    marginal, paired_dir = ctx.inputs["build_marginal"], ctx.inputs["build_paired"]
    tcr = read_table(marginal / "marginal_tcr.parquet").column("cdr3").to_pylist()
    pep = read_table(marginal / "marginal_pep.parquet").column("peptide").to_pylist()
    # marginal data: single components, each with the other chain absent
    width = sequence_width(cfg)
    m_tok, m_reg = encode_many([""] * len(tcr) + pep, tcr + [""] * len(pep), width)
    paired = read_table(paired_dir / "paired.parquet").to_pydict()
    p_tok, p_reg = encode_many(paired["epitope"], paired["cdr3"], width)
    split, label = np.array(paired["split"]), np.array(paired["label"])
    out = {"marginal": (m_tok, m_reg)}
    for name in np.unique(split):
        rows = torch.from_numpy(np.flatnonzero(split == name))
        out[str(name)] = (p_tok[rows], p_reg[rows])
    # the MLM sees only observed (binding) complexes, like VDJdb; negatives are for scoring
    epitope_id = np.array(paired["epitope_id"])
    for cap in cfg.train.binders_per_epitope:
        binders = torch.from_numpy(capped_binders(split, label, epitope_id, cap))
        out[f"train_binders_{cap}"] = (p_tok[binders], p_reg[binders])
    save_torch(ctx.out_dir / "tokens.pt", out)
    ctx.write_metrics({f"n_{k}": int(v[0].shape[0]) for k, v in out.items()})


def capped_binders(split: np.ndarray, label: np.ndarray, epitope_id: np.ndarray, cap: int) -> np.ndarray:
    """Rows of the first ``cap`` training binders of each epitope (in table order, which is
    random), so smaller caps are subsets of larger ones and the evaluation sets never change."""
    rows = []
    for e in np.unique(epitope_id):
        rows += list(np.flatnonzero((split == "train") & (label == 1) & (epitope_id == e))[:cap])
    return np.sort(np.array(rows, dtype=np.int64))


def mlm_batches(sources: list[tuple[torch.Tensor, torch.Tensor]], weights: list[float],
                batch_size: int, t, gen: torch.Generator) -> Iterator:
    """Endless masked batches; each batch comes from one source picked with ``weights``."""
    probs = torch.tensor(weights, dtype=torch.float)
    while True:
        tokens, region = sources[int(torch.multinomial(probs, 1, generator=gen))]
        rows = torch.randint(len(tokens), (batch_size,), generator=gen)
        yield mask_batch(tokens[rows], region[rows], t.mask_rate, t.segment_prob, gen)


def new_model(cfg) -> torch.nn.Module:
    """The small encoder (synthetic source) or the user's ESM-2 checkpoint (published tables);
    both map this module's token ids to 20 amino-acid logits, so every stage is shared."""
    if cfg.paper.source == "tables":
        return EsmMaskedLM(cfg.paper.backbone, cfg.paper.device)
    m = cfg.model
    if m.family == "esm":
        return tiny_esm(m.d_model, m.n_layers, m.n_heads, m.dropout)
    return MaskedLM(m.d_model, m.n_layers, m.n_heads, m.dropout)


def train_mlm(model, sources, weights, steps: int, cfg, seed: int, ctx, prefix: str) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    t = cfg.train
    return fit(model, mlm_batches(sources, weights, t.batch_size, t, gen), mlm_loss, steps=steps,
               lr=t.lr, warmup=t.warmup, ctx=ctx, log_every=25, prefix=prefix)


def pretrain_marginal_stage(cfg, ctx) -> None:
    """S1: component representations from unpaired TCRs and peptides."""
    torch.set_num_threads(1)
    seed = ctx.item["seed"]
    seed_everything(seed)
    tokens = load_torch(ctx.inputs["tokenize"] / "tokens.pt")
    model = new_model(cfg)
    records = train_mlm(model, [tokens["marginal"]], [1.0], cfg.train.marginal_steps, cfg,
                        seed, ctx, "s1")
    save_torch(ctx.out_dir / "model.pt", model.state_dict())
    ctx.write_metrics({"final_loss": records[-1]["s1/loss"]})


def train_paired_stage(cfg, ctx) -> None:
    """S2 per variant and binder cap (see the module docstring for the step budgets)."""
    torch.set_num_threads(1)
    variant, seed, cap = ctx.item["variant"], ctx.item["seed"], ctx.item["binders"]
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {VARIANTS}")
    seed_everything(seed)
    t = cfg.train
    tokens = load_torch(ctx.inputs["tokenize"] / "tokens.pt")
    paired = tokens[f"train_binders_{cap}"]
    model = new_model(cfg)
    total = t.marginal_steps + t.paired_steps
    metrics = {"n_train_binders": int(paired[0].shape[0])}
    if variant in ("curriculum", "marginal_only"):
        model.load_state_dict(load_torch(ctx.inputs["pretrain_marginal"][str(seed)] / "model.pt"))
    if variant == "curriculum":
        records = train_mlm(model, [paired], [1.0], t.paired_steps, cfg, seed + 1, ctx, "s2")
    elif variant == "paired_only":
        records = train_mlm(model, [paired], [1.0], t.paired_steps, cfg, seed + 1, ctx, "s2")
    elif variant == "paired_only_total":
        records = train_mlm(model, [paired], [1.0], total, cfg, seed + 1, ctx, "s2")
    elif variant == "mixed":  # same marginal/paired exposure as the curriculum, shuffled together
        records = train_mlm(model, [tokens["marginal"], paired],
                            [t.marginal_steps / total, t.paired_steps / total], total, cfg,
                            seed + 1, ctx, "s2")
    else:
        records = []
    if records:
        metrics["final_loss"] = records[-1]["s2/loss"]
    save_torch(ctx.out_dir / "model.pt", model.state_dict())
    ctx.write_metrics(metrics)
