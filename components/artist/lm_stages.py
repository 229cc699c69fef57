"""Stage bodies of the language-model policy (``lm.enabled``): the paper profile (Qwen3-4B from
``paper.model_path`` on the six benchmarks) and the tiny-Qwen3 measurement on the generated
families run this same code; the stage functions in train.py / evaluate.py dispatch here.

- **sft**: supervised fine-tuning on text traces (LoRA through peft for a checkpoint, as the
  paper; a tiny Qwen3 built here trains in full): the controller writes the trace's zoom rounds
  then ACCEPT, the reasoner answers after exactly those zooms.
- **rl**: hierarchical policy optimisation through ``components.common.lm_rl.grpo_train`` (TRL's
  ``GRPOTrainer``) on a LoRA, in alternating blocks of ``lm.rl_block`` steps per role:
  *controller* steps — K plans per question, reward 3·consistency − 0.1·zooms + 1·format +
  the annealed exploration bonus (−2 on a format error; ``rewards.controller_reward``), where
  consistency is the share of N reasoner samples of the current policy that answer right after
  the plan's zooms; no KL. *Reasoner* steps — per question one of its K plans, drawn with
  probability ∝ (std of its N reasoner rewards + eps)^(1/T) (variance-guided), then N
  answers after that plan's zooms, reward 3·accuracy + 1·format, KL β to the policy at the start
  of the reasoner block (TRL's reference copy of the LoRA; the paper: the SFT policy).
- **evaluate**: accuracy, macro-F1, fraction read and zooms per family over ``evaluate.runs``
  sampled runs (controller T 1.0, reasoner T 0.7) for the SFT and SFT+RL policies; on generated
  families also the oracle windows; the overview-only reasoner; a uniform guess.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from components.artist.lm import (LMRunner, Question, TextSettings, answer_text, completion_text,
                                  controller_messages, family_question, fraction_read, parse_answer,
                                  parse_plan, plan_text, reasoner_format, reasoner_messages, sft_batch,
                                  sft_loss)
from components.artist.rewards import controller_reward, reasoner_reward, variance_guided_choice
from components.common.io import read_table, write_json_atomic, write_table
from components.common.seeds import seed_everything

def text_settings(cfg) -> TextSettings:
    return TextSettings(budget=cfg.views.budget, max_zooms=cfg.views.max_zooms,
                        value_scale=cfg.lm.value_scale, value_clip=cfg.lm.value_clip)


# ---------------------------------------------------------------- questions
def load_questions(path: Path, views_cfg, limit: int = 0) -> tuple[list[Question], dict]:
    """Questions of a task table (generated families or a paper benchmark table) and their
    hidden metadata (family, evidence, decoys, SFT windows of curated traces)."""
    from components.artist.lm import FAMILY_OPTIONS

    t = read_table(path).to_pydict()
    n = len(t["family"]) if not limit else min(limit, len(t["family"]))
    qs = []
    for i in range(n):
        length = int(t["length"][i])
        series = np.asarray(t["series"][i][:length], dtype=np.float64)
        fam = t["family"][i]
        if "question" in t:
            text, options = t["question"][i], tuple(t["options"][i])
        else:
            text = family_question(fam, t["args"][i], length, views_cfg.n_fine, views_cfg.n_quarters)
            options = FAMILY_OPTIONS[fam]
        qs.append(Question(text=text, options=tuple(options), series=series, answer=int(t["answer"][i])))
    meta = {"family": list(t["family"][:n]), "evidence": list(t["evidence"][:n]), "decoys": list(t["decoys"][:n]),
            "cot_windows": list(t.get("cot_windows", [[]] * len(t["family"]))[:n])}
    return qs, meta


def oracle_windows(meta: dict, i: int, length: int, views_cfg) -> list[tuple[int, int]] | None:
    """The oracle's windows (every candidate event) for a generated question; None without
    evidence annotations (the paper's benchmarks have none)."""
    from components.artist.policy import oracle_row
    from components.artist.views import action_windows

    if not meta["evidence"][i]:
        return None
    ids = oracle_row(meta["evidence"][i], meta["decoys"][i], length, views_cfg.n_fine, views_cfg.max_zooms)
    wins = action_windows(length, views_cfg.n_fine, views_cfg.n_quarters)
    return [(int(wins[a][0]), int(wins[a][1])) for a in ids]


# ---------------------------------------------------------------- the policy on disk
def _device(cfg) -> str:
    return cfg.paper.device if cfg.paper.enabled else "cpu"


def new_policy(cfg, questions: list[Question], seed: int):
    """The starting model and tokenizer: the paper's checkpoint, or a tiny Qwen3 built here
    (``Qwen3Config`` via components.common.tiny_models) with a word-level tokenizer."""
    if cfg.paper.enabled:
        from components.common.hf_models import load_model, load_tokenizer

        return (load_model(cfg.paper.model_path, "causal_lm", device=_device(cfg)),
                load_tokenizer(cfg.paper.model_path, padding_side="left"))
    from components.artist.lm import build_tokenizer
    from components.common.tiny_models import build_tiny

    s, lm = text_settings(cfg), cfg.lm
    texts = []
    for q in questions:
        texts += [m["content"] for m in controller_messages(q, s) + reasoner_messages(q, [(0, 1)], s)]
    tok = build_tokenizer(texts, max(q.length for q in questions), lm.value_clip)
    model = build_tiny("qwen3", seed=seed, vocab_size=len(tok), hidden_size=lm.d_model,
                       intermediate_size=4 * lm.d_model, num_hidden_layers=lm.n_layers,
                       num_attention_heads=lm.n_heads, num_key_value_heads=max(1, lm.n_heads // 2),
                       head_dim=lm.d_model // lm.n_heads, max_position_embeddings=lm.max_positions)
    return model, tok


def load_policy(cfg, sft_dir: Path, rl_dir: Path | None = None):
    """SFT policy (base + merged SFT adapter), with the RL adapter merged on top when given."""
    from components.common.hf_models import load_model, load_tokenizer
    from components.common.peft_lora import load_adapter, merge_lora

    sft_dir = Path(sft_dir)
    base = sft_dir / "policy" if (sft_dir / "policy").is_dir() else Path(cfg.paper.model_path)
    model = load_model(base, "causal_lm", device=_device(cfg))
    tok = load_tokenizer(base, padding_side="left")
    if (sft_dir / "adapter").is_dir():
        model = merge_lora(load_adapter(model, sft_dir / "adapter"))
    if rl_dir is not None:
        rl_dir = Path(rl_dir)
        if (rl_dir / "adapter").is_dir():
            model = merge_lora(load_adapter(model, rl_dir / "adapter"))
        elif (rl_dir / "policy").is_dir():
            model = load_model(rl_dir / "policy", "causal_lm", device=_device(cfg))
    return model.eval(), tok


def save_policy(model, tok, out: Path, adapter: bool) -> None:
    from components.common.hf_models import save_model
    from components.common.peft_lora import save_adapter

    if adapter:
        save_adapter(model, out / "adapter")
    else:
        save_model(model, out / "policy", tok)


# ---------------------------------------------------------------- traces
def lm_trace_windows(cfg, table: dict, actions: list[list[int]] | None) -> list[list[list[int]]]:
    """SFT windows per training question: the curated trace's zooms (paper) or the synthesised
    trace's grid windows (generated families, the same traces the tiny policy imitates)."""
    from components.artist.views import action_windows

    if actions is None:
        return [list(map(list, w)) for w in table.get("cot_windows", [[]] * len(table["family"]))]
    v = cfg.views
    out = []
    for acts, n in zip(actions, table["length"]):
        wins = action_windows(int(n), v.n_fine, v.n_quarters)
        out.append([[int(wins[a][0]), int(wins[a][1])] for a in acts])
    return out


# ---------------------------------------------------------------- SFT
def lm_sft_stage(cfg, ctx) -> None:
    seed = ctx.item["seed"]
    seed_everything(seed)
    s, lm = text_settings(cfg), cfg.lm
    data = ctx.inputs["generate_tasks"]
    qs, _ = load_questions(data / "train.parquet", cfg.views)
    windows = [[tuple(w) for w in ws] for ws in
               read_table(ctx.inputs["build_sft_traces"] / "sft_traces.parquet").to_pydict()["windows"]]
    model, tok = new_policy(cfg, qs, seed)
    lora = lm.sft_lora and cfg.paper.enabled      # a tiny model built here has nothing to adapt: full SFT
    if lora:
        from components.common.peft_lora import attach_lora

        model = attach_lora(model, lm.lora_targets, rank=lm.lora_rank, alpha=lm.lora_alpha, dropout=lm.lora_dropout)
        if lm.gradient_checkpointing:      # as the official configs (a 4B model's activations)
            model.gradient_checkpointing_enable()
            model.enable_input_require_grads()
    examples = [(controller_messages(q, s), plan_text(w)) for q, w in zip(qs, windows)]
    examples += [(reasoner_messages(q, w, s), answer_text(q.answer)) for q, w in zip(qs, windows)]
    rng = np.random.default_rng(seed)

    def batches():
        while True:
            pick = rng.integers(len(examples), size=lm.sft_batch)
            yield sft_batch(tok, [examples[i][0] for i in pick], [examples[i][1] for i in pick])

    from components.common.train import fit

    records = fit(model, batches(), sft_loss, steps=lm.sft_steps, lr=lm.sft_lr, warmup=max(1, lm.sft_steps // 10),
                  ctx=ctx, prefix="sft", log_every=10)
    model.eval()
    save_policy(model, tok, ctx.out_dir, adapter=lora)
    premise = oracle_premise(cfg, model, tok, data / "val.parquet")
    write_json_atomic(ctx.out_dir / "premise.json", premise)
    ctx.write_metrics({"final_loss": records[-1]["sft/loss"], "steps": lm.sft_steps, "rows": len(examples),
                       "n_params": int(sum(p.numel() for p in model.parameters())),
                       "architecture": type(model.get_base_model() if hasattr(model, "get_base_model") else model).__name__,
                       **premise})


def oracle_premise(cfg, model, tok, val_path: Path) -> dict:
    """P1 for the LM: greedy reasoner accuracy per family on the oracle windows (val); only for
    questions with evidence annotations (the generated families)."""
    s = text_settings(cfg)
    qs, meta = load_questions(val_path, cfg.views)
    keep = range(len(qs))
    if cfg.lm.val_questions and cfg.lm.val_questions < len(qs):   # evenly spaced: every family
        keep = np.unique(np.linspace(0, len(qs) - 1, cfg.lm.val_questions).round().astype(int))
    rows = [(int(i), oracle_windows(meta, int(i), qs[i].length, cfg.views)) for i in keep]
    rows = [(i, w) for i, w in rows if w is not None]
    if not rows:
        return {}
    torch.manual_seed(0)
    runner = LMRunner(model, tok, cfg.lm.eval_batch)
    outs = runner.sample([reasoner_messages(qs[i], w, s) for i, w in rows], 1, 0.0, cfg.lm.reasoner_tokens)
    hits: dict[str, list[bool]] = {}
    for (i, _), o in zip(rows, outs):
        hits.setdefault(meta["family"][i], []).append(parse_answer(o[0], len(qs[i].options)) == qs[i].answer)
    out = {f"val_oracle_acc_{f}": float(np.mean(h)) for f, h in hits.items()}
    out["val_oracle_acc_min"] = min(out.values())
    return out


# ---------------------------------------------------------------- hierarchical RL
class ControllerReward:
    """Reward of controller plans: the reasoner (the current policy) answers N times after each
    plan's zooms; 3·consistency − 0.1·zooms + format + exploration, −2 on a format error.
    Keeps, per question, each plan's windows and its N reasoner rewards for the reasoner block."""

    __name__ = "controller"

    def __init__(self, runner: LMRunner, questions: list[Question], s: TextSettings, rl, lm):
        self.runner, self.qs, self.s, self.rl, self.lm = runner, questions, s, rl, lm
        self.step, self.records, self.groups = 0, [], {}

    def anneal(self) -> int:
        return max(1, int(round(self.rl.explore_anneal_fraction * self.rl.iterations)))

    def __call__(self, prompts, completions, qid, **_) -> list[float]:
        rl = self.rl
        plans = [parse_plan(completion_text(c), self.qs[q].length, self.s.max_zooms) for c, q in zip(completions, qid)]
        outs = self.runner.sample([reasoner_messages(self.qs[q], p.windows, self.s) for p, q in zip(plans, qid)],
                                  rl.reasoner_rollouts, rl.reasoner_temperature, self.lm.reasoner_tokens)
        rewards, cons = [], []
        for q, p, group in zip(qid, plans, outs):
            n_opt = len(self.qs[q].options)
            correct = np.array([parse_answer(o, n_opt) == self.qs[q].answer for o in group], dtype=float)
            fmt = np.array([reasoner_format(o, n_opt) for o in group])
            cons.append(correct.mean())
            rewards.append(controller_reward(
                float(correct.mean()), len(p.windows), p.format, p.error, len(set(p.windows)), self.step,
                w_consistency=rl.w_consistency, round_penalty=rl.round_penalty, w_format=rl.w_format,
                error_reward=rl.format_error_reward, w_explore=rl.w_explore, anneal=self.anneal(),
                lo=rl.explore_min_segments, hi=rl.explore_max_segments))
            self.groups.setdefault(int(q), []).append(
                (p.windows, reasoner_reward(correct, fmt, rl.w_accuracy, rl.w_format)))
        self.records.append({"reward": float(np.mean(rewards)), "consistency": float(np.mean(cons)),
                             "format_error": float(np.mean([p.error for p in plans])),
                             "zooms": float(np.mean([len(p.windows) for p in plans])),
                             "explore_weight": rl.w_explore * max(0.0, 1.0 - self.step / self.anneal())})
        self.step += 1
        return rewards


class ReasonerReward:
    """3·accuracy + 1·format of one reasoner answer."""

    __name__ = "reasoner"

    def __init__(self, questions: list[Question], rl):
        self.qs, self.rl, self.records = questions, rl, []

    def __call__(self, prompts, completions, qid, **_) -> list[float]:
        out, acc = [], []
        for c, q in zip(completions, qid):
            text, n_opt = completion_text(c), len(self.qs[q].options)
            right = float(parse_answer(text, n_opt) == self.qs[q].answer)
            acc.append(right)
            out.append(float(reasoner_reward(right, reasoner_format(text, n_opt), self.rl.w_accuracy, self.rl.w_format)))
        self.records.append({"reasoner_reward": float(np.mean(out)), "reasoner_acc": float(np.mean(acc))})
        return out


def pick_reasoner_windows(groups: dict, rl, rng: np.random.Generator) -> list[tuple[int, list]]:
    """Per question one plan, drawn by the std of its reasoner rewards (variance-guided)."""
    out = []
    for q in sorted(groups):
        plans = groups[q]
        k = variance_guided_choice(np.stack([r for _, r in plans]), rl.variance_temperature, rl.variance_eps, rng)
        out.append((q, plans[k][0]))
    return out


def drop_reference_adapter(model) -> None:
    """TRL's GRPOTrainer, given a peft model and a KL weight, adds a frozen "ref" adapter copied
    from the current one (the reference of that call); remove it so the next block can add its
    own. So the reasoner's KL reference is the policy at the start of each reasoner block (the
    paper: the SFT policy; CLAIMS.md says so)."""
    if hasattr(model, "peft_config") and "ref" in model.peft_config:
        model.delete_adapter("ref")
        model.set_adapter("default")


def grpo_batch_args(lm, questions: int, group_size: int) -> dict[str, int]:
    """The batch arguments of one role's ``grpo_train`` call: ``questions`` prompts a step, each
    with ``group_size`` rollouts, in micro-batches of ``lm.micro_questions`` questions whose
    gradients the step accumulates (the official RL: batch 1, gradient accumulation 16; 0 or a
    value that does not divide ``questions``: the whole step at once). TRL still generates the
    step's groups in one call (``generation_batch`` left at the whole step), as before."""
    micro = lm.micro_questions if 0 < lm.micro_questions < questions and questions % lm.micro_questions == 0 \
        else questions
    return {"prompts_per_step": questions, "group_size": group_size, "micro_batch": micro * group_size}


def lm_rl_stage(cfg, ctx) -> None:
    from components.common.lm_rl import grpo_train
    from components.common.peft_lora import attach_lora

    seed = ctx.item["seed"]
    seed_everything(seed)
    rng = np.random.default_rng(seed)
    s, lm, rl = text_settings(cfg), cfg.lm, cfg.rl
    qs, _ = load_questions(ctx.inputs["generate_tasks"] / "train.parquet", cfg.views)
    model, tok = load_policy(cfg, ctx.inputs["sft"])
    if lm.rl_lora:
        model = attach_lora(model, lm.lora_targets, rank=lm.lora_rank, alpha=lm.lora_alpha, dropout=0.0)
    runner = LMRunner(model, tok, lm.eval_batch)
    creward, rreward = ControllerReward(runner, qs, s, rl, lm), ReasonerReward(qs, rl)
    q, done, block = rl.questions, 0, 0
    while done < rl.iterations:
        steps = min(lm.rl_block, rl.iterations - done)
        idx = rng.choice(len(qs), size=q * steps, replace=len(qs) < q * steps)
        creward.groups = {}
        common = dict(steps=steps, lr=lm.rl_lr, seed=seed * 1000 + block, loss_type=lm.loss_type,
                      scale_rewards="group")
        with tempfile.TemporaryDirectory() as tmp:
            model = grpo_train(model, tok, [{"prompt": controller_messages(qs[i], s), "qid": int(i)} for i in idx],
                               creward, tmp, max_new_tokens=lm.controller_tokens, beta=0.0,
                               temperature=rl.controller_temperature,
                               **grpo_batch_args(lm, q, rl.controller_rollouts), **common).model
        runner.model = model
        picks = pick_reasoner_windows(creward.groups, rl, rng)
        rows = [{"prompt": reasoner_messages(qs[i], w, s), "qid": int(i)} for i, w in picks]
        rows = (rows * (1 + q * steps // max(1, len(rows))))[:q * steps]
        with tempfile.TemporaryDirectory() as tmp:
            model = grpo_train(model, tok, rows, rreward, tmp, max_new_tokens=lm.reasoner_tokens, beta=rl.kl_beta,
                               temperature=rl.reasoner_temperature,
                               **grpo_batch_args(lm, q, rl.reasoner_rollouts), **common).model
        drop_reference_adapter(model)
        runner.model = model
        done, block = done + steps, block + 1
        recent = creward.records[-steps:] + rreward.records[-steps:]
        window = {k: float(np.mean([r[k] for r in recent if k in r])) for k in {k for r in recent for k in r}}
        ctx.log_metrics({f"rl/{k}": v for k, v in window.items()}, step=done)
        ctx.progress(done, rl.iterations, f"reward {window['reward']:.3f} consistency {window['consistency']:.3f}")
    model.eval()
    save_policy(model, tok, ctx.out_dir, adapter=lm.rl_lora)
    hist = [{**c, **r} for c, r in zip(creward.records, rreward.records)]
    write_table(ctx.out_dir / "history.parquet", {k: [h[k] for h in hist] for k in hist[0]})
    k = max(1, min(20, len(hist) // 2))
    last = {key: float(np.mean([h[key] for h in hist[-k:]])) for key in hist[0]}
    first = {key: float(np.mean([h[key] for h in hist[:k]])) for key in hist[0]}
    ctx.write_metrics({**{f"last_{key}": v for key, v in last.items()}, **{f"first_{key}": v for key, v in first.items()},
                       "final_explore_weight": hist[-1]["explore_weight"], "iterations": len(hist)})


# ---------------------------------------------------------------- evaluation
def scores(families: list[str], truth: np.ndarray, pred: np.ndarray, n_options: np.ndarray) -> dict:
    """Per family (accuracy, macro-F1 over the family's options; an invalid answer is wrong)."""
    from sklearn.metrics import f1_score

    fam = np.asarray(families)
    out = {}
    for f in dict.fromkeys(families):
        m = fam == f
        labels = list(range(int(n_options[m].max())))
        out[f] = (float(np.mean(pred[m] == truth[m])),
                  float(f1_score(truth[m], pred[m], labels=labels, average="macro", zero_division=0)))
    return out


def lm_evaluate_stage(cfg, ctx) -> None:
    from components.artist.evaluate import summarise_rows

    seed = ctx.item["seed"]
    seed_everything(seed)
    s, lm, ev = text_settings(cfg), cfg.lm, cfg.evaluate
    qs, meta = load_questions(ctx.inputs["generate_tasks"] / "test.parquet", cfg.views)
    truth = np.array([q.answer for q in qs])
    n_opt = np.array([len(q.options) for q in qs])
    lengths = [q.length for q in qs]
    torch.manual_seed(ev.seed * 1000 + seed)
    rows = []

    def record(system, run, pred, windows=None):
        pred = np.array([-1 if p is None else p for p in pred])
        read = np.array([fraction_read(w, n) for w, n in zip(windows, lengths)]) if windows else np.zeros(len(qs))
        zooms = np.array([len(w) for w in windows]) if windows else np.zeros(len(qs))
        fam = np.asarray(meta["family"])
        for f, (acc, f1) in scores(meta["family"], truth, pred, n_opt).items():
            m = fam == f
            rows.append({"system": system, "run": run, "family": f, "acc": acc, "macro_f1": f1,
                         "fraction_read": float(read[m].mean()), "zooms": float(zooms[m].mean())})

    def answers(runner, windows, temperature):
        outs = runner.sample([reasoner_messages(q, w, s) for q, w in zip(qs, windows)], 1, temperature,
                             lm.reasoner_tokens)
        return [parse_answer(o[0], len(q.options)) for o, q in zip(outs, qs)]

    oracle = [oracle_windows(meta, i, q.length, cfg.views) for i, q in enumerate(qs)]
    have_oracle = all(w is not None for w in oracle)
    errors = {}
    for name, rl_dir in (("artist_sft", None), ("artist_rl", ctx.inputs["rl"])):
        model, tok = load_policy(cfg, ctx.inputs["sft"], rl_dir)
        runner = LMRunner(model, tok, lm.eval_batch)
        errs = []
        for run in range(ev.runs):
            outs = runner.sample([controller_messages(q, s) for q in qs], 1, ev.controller_temperature,
                                 lm.controller_tokens)
            plans = [parse_plan(o[0], q.length, s.max_zooms) for o, q in zip(outs, qs)]
            errs.append(float(np.mean([p.error for p in plans])))
            windows = [p.windows for p in plans]
            record(name, run, answers(runner, windows, ev.reasoner_temperature), windows)
            if name == "artist_rl":
                empty = [[] for _ in qs]
                record("overview_only", run, answers(runner, empty, ev.reasoner_temperature), empty)
                if have_oracle:
                    record("oracle", run, answers(runner, oracle, ev.reasoner_temperature), oracle)
            ctx.progress(run + 1, ev.runs, f"{name}: sampled runs")
        errors[f"{name}_format_error"] = float(np.mean(errs))
        del model
    rng = np.random.default_rng(seed)
    for run in range(ev.runs):
        record("uniform", run, rng.integers(0, n_opt))
    write_table(ctx.out_dir / "metrics.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    summary = summarise_rows(rows)
    write_json_atomic(ctx.out_dir / "summary.json", summary)
    ctx.write_metrics({**{f"{sys}_{k}": v for sys, d in summary.items() for k, v in d.items()}, **errors})
