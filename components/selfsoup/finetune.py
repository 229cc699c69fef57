"""Fine-tuning with labels: encoder (stock, an ingredient, or a self-soup) + the shared head init.

Each model is trained once per learning rate of the grid; the learning rate is chosen on the
validation split (the official code picks the best *test* checkpoint; we do not).

``finetune.probe`` (small profile, v5): LP-FT. Each model's head is first a logistic-regression
probe of its *own* frozen features (the stock's is its head_init), then the whole model is
fine-tuned briefly at a low learning rate, so that fine-tuning is a small step next to the SSL
inter-training, as in the paper (10k SSL steps vs ~800 fine-tuning steps). Without it every
model starts from the stock's probe head (the official recipe; the paper profile).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from components.common.io import load_torch, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.soups import uniform_soup
from components.common.train import fit
from components.selfsoup.data import augment, batches, load_splits, member_dir
from components.selfsoup.ssl import build_encoder, cpu_state, device, linear_probe_head, start, stock_arch
from components.selfsoup.vit import Classifier, autocast, device_of, embed, predict_logits


def initial_encoder_state(name: str, seed: int, cfg, inputs) -> dict:
    """Where fine-tuning starts for ``name`` (see FineTune.models in config.py)."""
    if name == "stock":
        return load_torch(inputs["pretrain_stock"][str(seed)] / "encoder.pt")
    if name == "selfsoup_shift":
        dirs = [member_dir(inputs["inter_train_shift"], seed, n) for n in cfg.robustness.ingredients]
    elif name == "selfsoup_clean":
        dirs = [member_dir(inputs["inter_train"], seed, n) for n in cfg.robustness.ingredients]
    else:
        return load_torch(member_dir(inputs["inter_train"], seed, name) / "encoder.pt")
    return uniform_soup([load_torch(d / "encoder.pt") for d in dirs])


def build_classifier(cfg, image_size: int, encoder_state: dict, head_state: dict,
                     arch: dict | None = None) -> Classifier:
    encoder = build_encoder(cfg.model, image_size, arch)
    encoder.load_state_dict(encoder_state)
    model = Classifier(encoder, cfg.model.num_classes)
    model.head.load_state_dict(head_state)
    return model.to(device(cfg.model))


def own_probe_head(cfg, train: dict, encoder_state: dict, arch: dict | None = None) -> dict:
    """Linear probe (the stock's probe recipe at C = finetune.probe_c) on the frozen features of ``encoder_state``."""
    encoder = build_encoder(cfg.model, train["x"].shape[-1], arch)
    encoder.load_state_dict(encoder_state)
    encoder.to(device(cfg.model))
    return linear_probe_head(embed(encoder, train["x"]).numpy(), train["y"].numpy(), cfg.finetune.probe_c,
                             cfg.model.num_classes)


def head_init(cfg, train: dict, encoder_state: dict, stock_dir, arch: dict | None = None,
              is_stock: bool = False) -> dict:
    """Where the head starts: the model's own probe (LP-FT, ``finetune.probe``) or the stock's.
    The stock's own probe is its head_init (same recipe, same features; the config requires
    finetune.probe_c == stock.probe_c), read rather than fitted a second time."""
    if cfg.finetune.probe and not is_stock:
        return own_probe_head(cfg, train, encoder_state, arch)
    return load_torch(stock_dir / "head_init.pt")


def accuracy(model, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((predict_logits(model, x).argmax(-1) == y).float().mean())


def fine_tune(model: Classifier, train: dict, ft, lr: float, ctx=None, prefix: str = "ft") -> None:
    steps = ft.epochs * max(1, len(train["x"]) // ft.batch)
    stream = (idx for idx in batches(len(train["x"]), ft.batch, torch.default_generator))

    def loss_fn(m, idx):
        dev = device_of(m)
        x = augment(train["x"][idx].to(dev), ft.augment)
        with autocast(dev):
            logits = m(x)
        return F.cross_entropy(logits.float(), train["y"][idx].to(dev))

    fit(model, stream, loss_fn, steps=steps, lr=lr, weight_decay=ft.weight_decay,
        warmup=int(ft.warmup_frac * steps), ctx=ctx, prefix=prefix, log_every=max(1, steps // 10))


def order_seed(seed: int, order: int) -> int:
    """Batch-order seed of fine-tune ``order`` (finetune.orders) of a seed; order 0 is the seed itself."""
    return seed if order == 0 else seed + 1000 * order


def fine_tune_model(cfg, name: str, seed: int, inputs, splits: dict, out_dir, ctx=None) -> dict:
    """Fine-tune ``name`` at every lr of the grid (same batches for each), keep the lr with the
    best val accuracy; saves model.pt and val.json under ``out_dir``.

    ``finetune.orders`` = k > 1 (v7): every lr is fine-tuned under k batch orders; val accuracy
    is then judged by its k-order mean (``val_acc_mean``: lr choice, premise P4), while the
    model kept (soups, evaluation, ``val_acc``) is order 0's, the same fine-tune as k = 1."""
    train, val = splits["train"], splits["val"]
    encoder_state = initial_encoder_state(name, seed, cfg, inputs)
    stock_dir = inputs["pretrain_stock"][str(seed)]
    arch = stock_arch(stock_dir)
    head_state = head_init(cfg, train, encoder_state, stock_dir, arch, is_stock=name == "stock")
    orders = cfg.finetune.orders
    best = None
    val_accs, order_accs = {}, {}
    for lr in cfg.finetune.lrs:
        for o in range(orders):
            # same batches and augmentations for every lr and every model of a seed (per order)
            seed_everything(order_seed(seed, o))
            model = build_classifier(cfg, train["x"].shape[-1], encoder_state, head_state, arch)
            suffix = f"_o{o}" if o else ""
            fine_tune(model, train, cfg.finetune, lr, ctx, prefix=f"ft_{name}_lr{lr:g}{suffix}")
            order_accs[(lr, o)] = accuracy(model, val["x"], val["y"])
            if o == 0:
                state = cpu_state(model)
        val_accs[lr] = sum(order_accs[(lr, o)] for o in range(orders)) / orders
        if best is None or val_accs[lr] > val_accs[best[0]]:
            best = (lr, state)
    if orders == 1:  # v5's val.json, unchanged
        summary = {"val_acc": val_accs[best[0]], "lr": best[0]} | {f"val_acc_lr{lr:g}": a for lr, a in val_accs.items()}
    else:
        summary = {"val_acc": order_accs[(best[0], 0)], "val_acc_mean": val_accs[best[0]], "lr": best[0]}
        summary |= {f"val_acc_o{o}": order_accs[(best[0], o)] for o in range(orders)}
        summary |= {f"val_acc_mean_lr{lr:g}": a for lr, a in val_accs.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    save_torch(out_dir / "model.pt", best[1])
    write_json_atomic(out_dir / "val.json", summary)  # read by the soup and report stages
    return summary


def fine_tune_stage(cfg, ctx) -> None:
    """Every model of FineTune.models for the instance's seed (one instance per seed)."""
    seed = ctx.item["seed"]
    start(seed)
    splits = load_splits(ctx.inputs["prepare_data"])
    metrics = {}
    for name in cfg.finetune.models:
        summary = fine_tune_model(cfg, name, seed, ctx.inputs, splits, ctx.out_dir / name, ctx)
        metrics |= {f"{name}_{k}": v for k, v in summary.items()}
    ctx.write_metrics(metrics)
