"""Stage train: one language model per (variant, seed) with the shared training loop."""
from __future__ import annotations

import time
from typing import Iterator

import torch

from components.common.io import load_torch, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit
from components.dagmoe.model import build_model, check_parameter_match, mean_loss, training_loss

CURVE_BATCH = 64  # windows per forward pass of the validation curve (speed only)


def random_windows(tokens: torch.Tensor, context: int, batch_size: int,
                   seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless batches of random (input, target) windows. The generator depends on the seed
    only, so every variant trained with the same seed sees the same batches in the same order."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    offsets = torch.arange(context + 1)
    while True:
        starts = torch.randint(0, len(tokens) - context - 1, (batch_size,), generator=gen)
        windows = tokens[starts[:, None] + offsets].long()
        yield windows[:, :-1], windows[:, 1:]


def eval_windows(tokens: torch.Tensor, context: int, max_tokens: int) -> torch.Tensor:
    """Non-overlapping (context+1)-token windows from the start of a validation stream."""
    n = min(len(tokens) - 1, max_tokens) // context
    starts = torch.arange(n) * context
    return tokens[starts[:, None] + torch.arange(context + 1)].long()


def model_config_dict(m) -> dict:
    return m.model_dump() if hasattr(m, "model_dump") else dict(vars(m))


def train_stage(cfg, ctx) -> None:
    m, t = cfg.model, cfg.train
    variant, seed = ctx.item["variant"], int(ctx.item["seed"])
    torch.set_num_threads(t.threads)  # fan-out instances share the cores
    corpus = ctx.inputs["build_corpus"]
    tokens = load_torch(corpus / "train.pt")
    curve_windows = eval_windows(load_torch(corpus / "val_id.pt"), m.context, t.curve_tokens)
    vocab_size = _vocab_size(corpus)
    match = check_parameter_match(m, vocab_size, t.param_match_tolerance)

    seed_everything(seed)
    model = build_model(variant, m, vocab_size).to(t.device)
    batches = ((x.to(t.device), y.to(t.device))
               for x, y in random_windows(tokens, m.context, t.batch_size, seed))
    start = time.perf_counter()
    records = fit(model, batches,
                  lambda mod, b: training_loss(mod, b, t.load_balance_coef, t.z_loss_coef),
                  steps=t.steps, lr=t.lr, weight_decay=t.weight_decay, warmup=t.warmup,
                  grad_clip=t.grad_clip, ctx=ctx, log_every=t.log_every,
                  eval_fn=lambda mod: {"train/val_id_loss": mean_loss(mod, curve_windows, CURVE_BATCH)},
                  eval_every=t.curve_every)
    seconds = time.perf_counter() - start

    save_torch(ctx.out_dir / "model.pt", {
        "variant": variant, "seed": seed, "vocab_size": vocab_size,
        "model_config": model_config_dict(m), "state_dict": model.state_dict()})
    write_json_atomic(ctx.out_dir / "history.json", records)
    losses = [r["train/loss"] for r in records]
    summary = {"params": match["params"][variant], "param_gap_dag_vs_shared": match["param_gap"],
               "train_loss_first": losses[0], "train_loss_final": losses[-1],
               **curve_flatness(records, "train/val_id_loss")}
    timing = {"seconds": seconds, "seconds_per_step": seconds / t.steps}
    write_json_atomic(ctx.out_dir / "summary.json", {**summary, **timing})  # read by analyze_routing
    ctx.write_metrics(summary)  # deterministic given params + seed; timings go to MLflow only
    ctx.log_metrics(timing)


def curve_flatness(records: list[dict], key: str) -> dict[str, float]:
    """How much a logged curve still moved in the last quarter of training: the drop from the
    point nearest 3/4 of the steps to the end, absolutely and as a share of the whole drop."""
    curve = [(r["step"], r[key]) for r in records if key in r]
    if len(curve) < 3:
        return {}
    last_step = curve[-1][0]
    _, at_three_quarters = min(curve, key=lambda p: abs(p[0] - 0.75 * last_step))
    first, final = curve[0][1], curve[-1][1]
    drop = at_three_quarters - final
    return {"val_curve_first": first, "val_curve_final": final,
            "val_curve_last_quarter_drop": drop,
            "val_curve_last_quarter_share": drop / (first - final) if first != final else 0.0}


def _vocab_size(corpus_dir) -> int:
    from components.common.io import read_json

    return int(read_json(corpus_dir / "meta.json")["vocab_size"])
