"""Evaluate ARTIST (SFT, SFT+RL) and the baselines on the test split, per family.

Systems (all share the test questions of one seed):
- artist_rl / artist_sft: the policy's own controller (temperature 1.0) and reasoner (0.7).
- random_ctrl: the SFT+RL reasoner after uniformly random windows, as many as artist_rl took on
  that example in that run (same reading budget).
- oracle: the SFT+RL reasoner after the fine windows of every candidate event (real and decoy),
  in position order: the best reading a controller can do (their coordinates do not give the
  answer away; only their content does).
- static / static_total: a reasoner trained on the coarse full-series view alone, at the
  per-view budget (and at ARTIST's largest total budget).
- stats_gbm: gradient boosting on full-resolution summary statistics (deterministic).
- uniform: a uniformly random answer (the "random guess" row).
Sampled systems are averaged over ``evaluate.runs`` independent runs, as in the paper.
"""
from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import f1_score

from components.artist.baselines import feature_matrix, fit_predict_gbm
from components.artist.policy import (answer_with, forward_state, load_tasks, make_policy, oracle_actions,
                                      rollout, sample_answers)
from components.artist.train import static_budget
from components.artist.views import fraction_read
from components.common.io import load_torch, write_json_atomic, write_table
from components.common.seeds import seed_everything


def family_scores(families: list[str], truth: np.ndarray, pred: np.ndarray) -> dict[str, tuple[float, float]]:
    out = {}
    fam = np.asarray(families)
    for f in dict.fromkeys(families):
        m = fam == f
        out[f] = (float(np.mean(pred[m] == truth[m])),
                  float(f1_score(truth[m], pred[m], average="macro", zero_division=0)))
    return out


def _predict_policy(model, tasks, max_zooms, t_c, t_r, gen):
    idx = torch.arange(len(tasks))
    chosen, final = rollout(model, tasks, idx, max_zooms, t_c, gen)
    pred = sample_answers(final, t_r, 1, gen)[:, 0]
    return chosen.numpy(), pred.numpy()


def random_actions(matched: np.ndarray, n_actions: int, gen: torch.Generator) -> torch.Tensor:
    out = torch.full(matched.shape, -1, dtype=torch.long)
    counts = (matched >= 0).sum(axis=1)
    for i, k in enumerate(counts):
        if k:
            out[i, :k] = torch.randperm(n_actions, generator=gen)[:k]
    return out


def evaluate_stage(cfg, ctx) -> None:
    if cfg.lm.enabled:
        from components.artist.lm_stages import lm_evaluate_stage

        return lm_evaluate_stage(cfg, ctx)
    seed = ctx.item["seed"]
    seed_everything(seed)
    v, ev = cfg.views, cfg.evaluate
    data = ctx.inputs["generate_tasks"]
    test = load_tasks(data / "test.parquet", v)
    truth = test.answer.numpy()
    gen = torch.Generator().manual_seed(ev.seed * 1000 + seed)
    rows = []

    def record(system, run, pred, chosen=None):
        read = fraction_read(chosen, test.length, v.n_fine, v.n_quarters) if chosen is not None \
            else np.zeros(len(test))
        zooms = (chosen >= 0).sum(axis=1) if chosen is not None else np.zeros(len(test))
        for fam, (acc, f1) in family_scores(test.family, truth, pred).items():
            m = np.asarray(test.family) == fam
            rows.append({"system": system, "run": run, "family": fam, "acc": acc, "macro_f1": f1,
                         "fraction_read": float(read[m].mean()), "zooms": float(zooms[m].mean())})

    policies = {}
    for name, stage in (("artist_sft", "sft"), ("artist_rl", "rl")):
        model = make_policy(cfg.model, v)
        model.load_state_dict(load_torch(ctx.inputs[stage] / "policy.pt"))   # this seed's item (item_deps)
        policies[name] = model.eval()
    oracle = oracle_actions(test, v.n_fine, v.max_zooms)
    for run in range(ev.runs):
        for name, model in policies.items():
            chosen, pred = _predict_policy(model, test, v.max_zooms, ev.controller_temperature,
                                           ev.reasoner_temperature, gen)
            record(name, run, pred, chosen)
            if name == "artist_rl":
                rand = random_actions(chosen, model.n_actions, gen)
                logits = answer_with(model, test, torch.arange(len(test)), rand)
                record("random_ctrl", run, sample_answers(logits, ev.reasoner_temperature, 1, gen)[:, 0].numpy(),
                       rand.numpy())
                logits = answer_with(model, test, torch.arange(len(test)), oracle)
                record("oracle", run, sample_answers(logits, ev.reasoner_temperature, 1, gen)[:, 0].numpy(),
                       oracle.numpy())
        ctx.progress(run + 1, ev.runs, "sampled runs")

    for key, path in ctx.inputs["train_static"].items():
        variant, s = key.rsplit("-", 1)
        if int(s) != seed:
            continue
        budget = static_budget(variant, v)
        static_test = load_tasks(data / "test.parquet", v, budget=budget, coarse_only=True)
        model = make_policy(cfg.model, v, budget=budget, max_views=1)
        model.load_state_dict(load_torch(path / "policy.pt"))
        model.eval()
        with torch.no_grad():
            _, logits = forward_state(model, static_test, torch.arange(len(test)),
                                      torch.full((len(test), 0), -1, dtype=torch.long))
        for run in range(ev.runs):
            record(variant, run, sample_answers(logits, ev.reasoner_temperature, 1, gen)[:, 0].numpy())

    # statistics + gradient boosting, one classifier per family (train split only)
    from components.common.io import read_table

    train_t = read_table(data / "train.parquet").to_pydict()
    tr_series = np.asarray(train_t["series"], dtype=np.float32)
    tr_x = feature_matrix(tr_series, np.asarray(train_t["length"]), train_t["args"])
    te_x = feature_matrix(test.series, test.length, test.args.tolist())
    tr_fam, te_fam = np.asarray(train_t["family"]), np.asarray(test.family)
    gbm = np.zeros(len(test), dtype=int)
    for fam in dict.fromkeys(test.family):
        m_tr, m_te = tr_fam == fam, te_fam == fam
        gbm[m_te] = fit_predict_gbm(tr_x[m_tr], np.asarray(train_t["answer"])[m_tr], te_x[m_te], seed,
                                    cfg.baselines.gbm_max_iter, cfg.baselines.gbm_learning_rate)
    record("stats_gbm", 0, gbm)
    rng = np.random.default_rng(seed)
    for run in range(ev.runs):
        record("uniform", run, rng.integers(0, test.n_options.numpy()))

    table = {k: [r[k] for r in rows] for k in rows[0]}
    write_table(ctx.out_dir / "metrics.parquet", table)
    summary = summarise_rows(rows)
    write_json_atomic(ctx.out_dir / "summary.json", summary)
    ctx.write_metrics({f"{sys}_{k}": val for sys, d in summary.items() for k, val in d.items()})


def summarise_rows(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per system: per-family acc / F1 / fraction read / zooms (mean over runs), and averages."""
    import pandas as pd

    df = pd.DataFrame(rows)
    per = df.groupby(["system", "family"])[["acc", "macro_f1", "fraction_read", "zooms"]].mean()
    out: dict[str, dict[str, float]] = {}
    for system in df.system.unique():
        fam = per.loc[system]
        d = {f"acc_{f}": float(fam.loc[f, "acc"]) for f in fam.index}
        d.update({f"f1_{f}": float(fam.loc[f, "macro_f1"]) for f in fam.index})
        d.update({"acc_avg": float(fam["acc"].mean()), "f1_avg": float(fam["macro_f1"].mean()),
                  "fraction_read": float(fam["fraction_read"].mean()), "zooms": float(fam["zooms"].mean())})
        out[system] = d
    return out
