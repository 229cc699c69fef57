"""lr sweep and training stages for both tasks; the loop itself is components.common.train.fit."""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch

from components.common.devices import resolve_device
from components.common.io import read_json, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit
from components.ioadam import tasks
from components.ioadam.data import load_corpus, load_digits_splits
from components.ioadam.optim import IOAdam, build_optimizer, linear_weights, state_bytes

# Clipping needs the global gradient norm, which fused IO-Adam never materialises, so nobody clips.
GRAD_CLIP = None


def _on_device(batches: Iterator, device: str) -> Iterator:
    for batch in batches:
        yield tuple(t.to(device) for t in batch) if isinstance(batch, tuple) else batch.to(device)


def device_of(device_cfg) -> str:
    """``auto`` resolves to CUDA when visible (paper profile), else CPU."""
    return str(resolve_device(device_cfg.device))


def _setup(device_cfg, seed: int) -> np.random.Generator:
    torch.set_num_threads(device_cfg.threads)
    return seed_everything(seed)


def _finish(optimizer) -> None:
    if isinstance(optimizer, IOAdam):
        optimizer.detach()         # restore plain nn.Linear forwards before saving / evaluating


def _state_summary(model, optimizer) -> dict[str, int]:
    return {"state_bytes_matrix": state_bytes(optimizer, linear_weights(model)),
            "state_bytes_total": state_bytes(optimizer)}


# -- digits ------------------------------------------------------------------------------------

def digits_steps(d, n_train: int) -> int:
    return d.epochs * (n_train // d.batch_size)


def run_digits(d, device_cfg, splits, name: str, lr: float, seed: int, ctx=None, prefix="train"):
    """Train the digits MLP with one optimizer; returns (model, optimizer, val scores)."""
    rng = _setup(device_cfg, seed)
    dev = device_of(device_cfg)
    model = tasks.MLP(d.sizes).to(dev)
    optimizer = build_optimizer(name, model, lr)
    batches = tasks.epoch_batches(splits["x_train"], splits["y_train"], d.batch_size, rng)
    fit(model, _on_device(batches, dev), tasks.classify_loss, steps=digits_steps(d, len(splits["y_train"])),
        optimizer=optimizer, grad_clip=GRAD_CLIP, ctx=ctx, prefix=prefix, log_every=20)
    _finish(optimizer)
    return model.cpu(), optimizer, tasks.digits_scores(model.cpu(), splits["x_val"], splits["y_val"])


def sweep_digits_stage(cfg, ctx) -> None:
    d, name = cfg.digits, ctx.item["optimizer"]
    splits = load_digits_splits(ctx.inputs["prepare_digits"])

    def score(lr: float) -> dict:
        vals = [run_digits(d, cfg.device, splits, name, lr, seed)[2] for seed in cfg.sweep.seeds]
        return {"val_acc": float(np.mean([v["acc"] for v in vals])),
                "val_loss": float(np.mean([v["loss"] for v in vals]))}

    # best mean validation accuracy; ties (360 val images) broken by the lower validation loss
    result = widening_sweep(d.lr_grid, score, lambda r: (-_finite(r["val_acc"], -1), _finite(r["val_loss"], math.inf)),
                            cfg.sweep.max_widen, ctx, name)
    _write_sweep(ctx, name, result, {"best_val_acc": result["best"]["val_acc"]})


def train_digits_stage(cfg, ctx) -> None:
    name, seed = ctx.item["optimizer"], ctx.item["seed"]
    splits = load_digits_splits(ctx.inputs["prepare_digits"])
    lr = read_json(ctx.inputs["sweep_digits"][name] / "sweep.json")["best_lr"]
    model, optimizer, val = run_digits(cfg.digits, cfg.device, splits, name, lr, seed, ctx=ctx)
    save_torch(ctx.out_dir / "model.pt", model.state_dict())
    summary = {"optimizer": name, "seed": seed, "lr": lr, "val_acc": val["acc"], "val_loss": val["loss"],
               **_state_summary(model, optimizer)}
    write_json_atomic(ctx.out_dir / "run.json", summary)
    ctx.write_metrics({k: v for k, v in summary.items() if k != "optimizer"})


# -- char LM -----------------------------------------------------------------------------------

def lm_vocab_size(c) -> int:
    """256 byte ids, or the size of the tokenizer the corpus was tokenised with."""
    if not c.tokenizer_path:
        return 256
    from components.common.hf_models import load_tokenizer

    return len(load_tokenizer(c.tokenizer_path))


def build_lm(c) -> torch.nn.Module:
    """The LM of the profile: the byte transformer, or a LLaMA built from ``LlamaConfig`` (no
    weights: pre-training starts from random init). Either way every projection is an
    ``nn.Linear``, which IO-Adam patches."""
    if c.arch == "bytes":
        return tasks.CharLM(d_model=c.d_model, n_heads=c.n_heads, n_layers=c.n_layers, seq_len=c.seq_len)
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=lm_vocab_size(c), hidden_size=c.d_model, num_hidden_layers=c.n_layers,
                         num_attention_heads=c.n_heads, intermediate_size=c.d_ff or 4 * c.d_model,
                         max_position_embeddings=c.seq_len, use_cache=False, tie_word_embeddings=False)
    return LlamaForCausalLM(config)


def run_charlm(c, device_cfg, corpus, name: str, lr: float, seed: int, steps: int, ctx=None,
               prefix="train"):
    """Train the byte LM with one optimizer; returns (model, optimizer, val loss)."""
    _setup(device_cfg, seed)
    dev = device_of(device_cfg)
    model = build_lm(c).to(dev)
    optimizer = build_optimizer(name, model, lr)
    gen = torch.Generator().manual_seed(seed)
    batches = tasks.lm_batches(corpus["train"], c.batch_size, c.seq_len, gen)
    fit(model, _on_device(batches, dev), tasks.lm_loss, steps=steps, warmup=min(c.warmup, steps // 2),
        optimizer=optimizer, grad_clip=GRAD_CLIP, ctx=ctx, prefix=prefix, log_every=20)
    _finish(optimizer)
    val = tasks.lm_eval_loss(model, corpus["val"].to(dev), c.seq_len, c.eval_windows)
    return model.cpu(), optimizer, val


def sweep_charlm_stage(cfg, ctx) -> None:
    c, name = cfg.charlm, ctx.item["optimizer"]
    corpus = load_corpus(ctx.inputs["prepare_corpus"])

    def score(lr: float) -> dict:
        vals = [run_charlm(c, cfg.device, corpus, name, lr, seed, c.sweep_steps)[2] for seed in cfg.sweep.seeds]
        return {"val_loss": float(np.mean(vals)), "val_loss_per_seed": vals}

    result = widening_sweep(c.lr_grid, score, lambda r: (_finite(r["val_loss"], math.inf),),
                            cfg.sweep.max_widen, ctx, name)
    _write_sweep(ctx, name, result, {"best_val_loss": result["best"]["val_loss"]})


# -- lr sweep ----------------------------------------------------------------------------------

def widening_sweep(grid: list[float], score, order, max_widen: int, ctx=None, name: str = "") -> dict:
    """Score every lr of ``grid``; while the best lr sits on an edge of the grid, extend the grid
    past that edge by the grid's own ratio (at most ``max_widen`` extra points), so the chosen lr
    is interior. ``score(lr)`` returns a row; ``order(row)`` sorts rows best first."""
    lrs = sorted(grid)
    rows = {lr: score(lr) for lr in lrs}
    ratio = lrs[1] / lrs[0] if len(lrs) > 1 else None
    widened = 0
    while True:
        best = min(lrs, key=lambda lr: order(rows[lr]))
        edge = best == lrs[0] or best == lrs[-1]
        if not edge or ratio is None or widened >= max_widen:
            break
        new = lrs[0] / ratio if best == lrs[0] else lrs[-1] * ratio
        new = float(f"{new:.6g}")
        rows[new] = score(new)
        lrs = sorted(rows)
        widened += 1
    table = [{"lr": lr, **rows[lr]} for lr in lrs]
    if ctx is not None:
        for i, row in enumerate(table):
            ctx.log_metrics({f"sweep/{k}": v for k, v in row.items() if isinstance(v, float)}, step=i)
        ctx.progress(len(table), len(table), f"{name} best lr={best:g} ({len(table)} lrs, widened {widened})")
    interior = len(lrs) > 2 and lrs[0] < best < lrs[-1]
    return {"rows": table, "best_lr": best, "best": rows[best], "interior": interior, "widened": widened,
            "grid": lrs}


def _write_sweep(ctx, name: str, result: dict, extra: dict) -> None:
    write_json_atomic(ctx.out_dir / "sweep.json", {"optimizer": name, **result})
    ctx.write_metrics({"best_lr": result["best_lr"], "lr_interior": result["interior"],
                       "n_lrs": len(result["grid"]), "widened": result["widened"], **extra})


def train_charlm_stage(cfg, ctx) -> None:
    c, name, seed = cfg.charlm, ctx.item["optimizer"], ctx.item["seed"]
    corpus = load_corpus(ctx.inputs["prepare_corpus"])
    lr = read_json(ctx.inputs["sweep_charlm"][name] / "sweep.json")["best_lr"]
    model, optimizer, val = run_charlm(c, cfg.device, corpus, name, lr, seed, c.steps, ctx=ctx)
    save_torch(ctx.out_dir / "model.pt", model.state_dict())
    summary = {"optimizer": name, "seed": seed, "lr": lr, "val_loss": val, "val_ppl": tasks.perplexity(val),
               **_state_summary(model, optimizer)}
    write_json_atomic(ctx.out_dir / "run.json", {**summary, "model_class": type(model).__name__,
                                                 "n_params": sum(p.numel() for p in model.parameters())})
    ctx.write_metrics({k: v for k, v in summary.items() if k != "optimizer"})


def _finite(value: float, fallback: float) -> float:
    return value if math.isfinite(value) else fallback
