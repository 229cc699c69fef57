"""Cooking: MAE pre-training of the stock, then SSL inter-training of ingredients.

Every ingredient starts from the same stock encoder; only its SSL objective, its
hyper-parameters and the unlabelled data it sees differ. Heads are discarded afterwards.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from components.common.devices import resolve_device
from components.common.io import load_torch, save_torch
from components.common.seeds import seed_everything
from components.common.train import fit, make_optimizer
from components.selfsoup import backbone, losses
from components.selfsoup.data import as_float, augment, batches, downstream_unlabelled, load_splits, shift_pool
from components.selfsoup.knn import knn_accuracy
from components.selfsoup.vit import Encoder, MAEDecoder, autocast, batched, device_of, embed, mlp, patchify


def start(seed: int) -> None:
    # tiny models: one thread per stage instance beats contention between parallel instances
    torch.set_num_threads(1)
    seed_everything(seed)


def build_encoder(model_cfg, image_size: int, arch: dict | None = None) -> nn.Module:
    """The tiny ViT from ``model.*``, or (``arch`` from the stock) the checkpoint's ViT-MAE."""
    if arch is not None:
        return backbone.build_hf_encoder(arch)
    return Encoder(image_size, model_cfg.patch, model_cfg.dim, model_cfg.depth, model_cfg.heads)


def build_decoder(model_cfg, encoder: nn.Module, arch: dict | None = None) -> nn.Module:
    if arch is not None:
        return backbone.build_hf_decoder(arch, encoder.num_patches)
    return MAEDecoder(encoder.num_patches, model_cfg.dim, model_cfg.decoder_dim, model_cfg.decoder_depth,
                      heads=2, patch=model_cfg.patch)


def stock_arch(stock_dir) -> dict | None:
    return backbone.read_arch(stock_dir)


def cpu_state(module: nn.Module) -> dict:
    return {k: v.cpu() for k, v in module.state_dict().items()}


def device(model_cfg) -> torch.device:
    return resolve_device(model_cfg.device)


def encode(fn, x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` under bf16 autocast on a GPU; the SSL losses then run in fp32."""
    with autocast(x.device):
        return fn(x).float()


def on_device(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return as_float(x.to(device_of(module)))


class MAE(nn.Module):
    def __init__(self, encoder: nn.Module, decoder: nn.Module, mask_ratio: float, aug=None, norm_pix: bool = False):
        super().__init__()
        self.encoder, self.decoder, self.mask_ratio, self.aug = encoder, decoder, mask_ratio, aug
        self.norm_pix = norm_pix

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        x = on_device(self.encoder, x)
        if self.aug is not None:
            x = augment(x, self.aug)
        b, n = x.shape[0], self.encoder.num_patches
        n_keep = max(1, int(round(n * (1 - self.mask_ratio))))
        keep = torch.rand(b, n).argsort(dim=1)[:, :n_keep]
        masked = torch.ones(b, n, dtype=torch.bool).scatter(1, keep, False)
        keep, masked = keep.to(x.device), masked.to(x.device)
        pred = encode(lambda v: self.decoder(self.encoder.tokens(v, keep), keep, n), x)
        # the target is in the encoder's input statistics (normalised pixels for the ViT-MAE)
        target = patchify(self.encoder.normalize(x), self.encoder.patch)
        if self.norm_pix:
            target = losses.norm_pix(target)
        return losses.mae_loss(pred, target, masked)


class MoCo(nn.Module):
    """Predictor on view 1 vs a stop-grad pass of the *same* encoder on view 2."""

    def __init__(self, encoder: nn.Module, temperature: float, aug):
        super().__init__()
        dim = encoder.dim
        self.encoder, self.head, self.temperature, self.aug = encoder, mlp(dim, 4 * dim, dim), temperature, aug

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        x = on_device(self.encoder, x)
        q = encode(lambda v: self.head(self.encoder(v)), augment(x, self.aug))
        with torch.no_grad():
            k = encode(self.encoder, augment(x, self.aug))
        return losses.info_nce(q, k, self.temperature)


class MMCR(nn.Module):
    def __init__(self, encoder: nn.Module, local: bool, aug):
        super().__init__()
        dim = encoder.dim
        self.encoder, self.head, self.local, self.aug = encoder, mlp(dim, 4 * dim, dim), local, aug

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        x = on_device(self.encoder, x)
        z1 = encode(lambda v: self.head(self.encoder(v)), augment(x, self.aug))
        with torch.no_grad():  # second view under stop-grad, as in the official code
            z2 = encode(lambda v: self.head(self.encoder(v)), augment(x, self.aug))
        return losses.mmcr_loss(z1, z2, self.local)


class LeJEPA(nn.Module):
    def __init__(self, encoder: nn.Module, lam: float, views: int, num_slices: int, aug):
        super().__init__()
        dim = encoder.dim
        self.encoder, self.head = encoder, mlp(dim, 4 * dim, dim)
        self.lam, self.views, self.num_slices, self.aug = lam, views, num_slices, aug

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        x = on_device(self.encoder, x)
        z = encode(lambda v: self.head(self.encoder(v)), augment(x.repeat(self.views, 1, 1, 1), self.aug))
        return losses.lejepa_loss(z.view(self.views, x.shape[0], -1), self.lam, self.num_slices)


def make_learner(recipe, encoder: nn.Module, decoder: nn.Module | None, aug) -> nn.Module:
    if recipe.algo == "mae":
        return MAE(encoder, decoder, recipe.mask_ratio, aug if recipe.augment else None, recipe.norm_pix)
    if recipe.algo == "moco":
        return MoCo(encoder, recipe.temperature, aug)
    if recipe.algo == "mmcr":
        return MMCR(encoder, recipe.local, aug)
    if recipe.algo == "lejepa":
        return LeJEPA(encoder, recipe.lam, recipe.views, recipe.num_slices, aug)
    raise ValueError(f"unknown SSL algorithm {recipe.algo!r}")


def train_ssl(learner: nn.Module, images: torch.Tensor, *, steps: int, batch: int, lr: float, head_lr: float,
              weight_decay: float, warmup_frac: float, ctx=None, prefix: str = "ssl") -> list[dict]:
    """Backbone and head get their own learning rates (two param groups, one schedule)."""
    encoder_ids = {id(p) for p in learner.encoder.parameters()}
    head_params = [p for p in learner.parameters() if id(p) not in encoder_ids]
    groups = [{"params": list(learner.encoder.parameters()), "lr": lr}]
    if head_params:
        groups.append({"params": head_params, "lr": head_lr})
    optimizer = make_optimizer(groups, lr=lr, weight_decay=weight_decay)
    stream = (images[i] for i in batches(len(images), batch, torch.default_generator))
    return fit(learner, stream, lambda model, x: model.loss(x), steps=steps, optimizer=optimizer,
               warmup=int(warmup_frac * steps), ctx=ctx, prefix=prefix, log_every=max(1, steps // 20))


def linear_probe_head(features: np.ndarray, labels: np.ndarray, c: float, num_classes: int) -> dict:
    """Logistic-regression head on frozen stock features: the shared head init of every FT."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=c, max_iter=3000).fit(features, labels)
    assert list(clf.classes_) == list(range(num_classes)), "every class needs a labelled example"
    return {"weight": torch.tensor(clf.coef_, dtype=torch.float32),
            "bias": torch.tensor(clf.intercept_, dtype=torch.float32)}


def stock_models(cfg, image_size: int) -> tuple[nn.Module, nn.Module, dict | None]:
    """The stock before its own pre-training: stock.checkpoint's ViT-MAE (encoder + decoder) when
    set, else a freshly initialised tiny ViT."""
    if cfg.stock.checkpoint:
        return backbone.load_checkpoint(cfg.stock.checkpoint)
    encoder = build_encoder(cfg.model, image_size)
    return encoder, build_decoder(cfg.model, encoder), None


def pretrain_stock_stage(cfg, ctx) -> None:
    seed = ctx.item["seed"]
    start(seed)
    splits = load_splits(ctx.inputs["prepare_data"])
    train, val = splits["train"], splits["val"]
    encoder, decoder, arch = stock_models(cfg, train["x"].shape[-1])
    s = cfg.stock
    records = []
    if s.steps:
        source = splits["source"]["x"]  # natural-image crops: no digit is ever seen by the stock
        learner = MAE(encoder, decoder, s.mask_ratio, aug=None).to(device(cfg.model))  # plain MAE, no view augmentation
        records = train_ssl(learner, source, steps=s.steps, batch=s.batch, lr=s.lr, head_lr=s.lr,
                            weight_decay=s.weight_decay, warmup_frac=0.05, ctx=ctx, prefix="stock")
    encoder.to(device(cfg.model))
    head = linear_probe_head(embed(encoder, train["x"]).numpy(), train["y"].numpy(), s.probe_c,
                             cfg.model.num_classes)
    val_feats = embed(encoder, val["x"])
    probe_acc = float(((val_feats @ head["weight"].T + head["bias"]).argmax(-1) == val["y"]).float().mean())
    save_torch(ctx.out_dir / "encoder.pt", cpu_state(encoder))
    save_torch(ctx.out_dir / "decoder.pt", cpu_state(decoder))
    save_torch(ctx.out_dir / "head_init.pt", head)
    backbone.save_arch(ctx.out_dir, arch)  # later stages rebuild the checkpoint's architecture from it
    ctx.write_metrics({"mae_loss": records[-1]["stock/loss"] if records else float("nan"),
                       "probe_val_acc": probe_acc,
                       "knn_val_acc": knn_accuracy(embed(encoder, train["x"]), train["y"], val_feats, val["y"],
                                                   num_classes=cfg.model.num_classes)})


def mean_cosine(z: torch.Tensor) -> float:
    """Mean cosine similarity between the embeddings of different images (1 = fully collapsed)."""
    z = torch.nn.functional.normalize(z.double(), dim=-1)
    n = len(z)
    return float(((z @ z.T).sum() - n) / (n * (n - 1)))


def projection_collapse(learner: nn.Module, images: torch.Tensor) -> dict:
    """Mean cosine of the SSL head's outputs on ``images``: a collapsed head (the trivial optimum
    of an invariance term) gives 1 and leaves the encoder where the stock was."""
    if not hasattr(learner, "head"):  # MAE: its decoder reconstructs pixels, nothing to collapse
        return {}
    return {"head_mean_cosine_val": mean_cosine(batched(nn.Sequential(learner.encoder, learner.head), images))}


def inter_train_one(cfg, name: str, stock_dir, images: torch.Tensor, steps: int, out_dir, ctx=None,
                    prefix: str = "ssl") -> dict:
    """One ingredient: SSL ``name``'s recipe from the stock on ``images``; saves its encoder
    (heads are discarded) under ``out_dir``; returns the final loss, the encoder and the learner."""
    recipe = cfg.inter_train.recipes[name]
    arch = stock_arch(stock_dir)
    encoder = build_encoder(cfg.model, images.shape[-1], arch)
    encoder.load_state_dict(load_torch(stock_dir / "encoder.pt"))
    decoder = None
    if recipe.algo == "mae":  # MAE ingredients continue from the stock's own decoder (unless fresh_decoder)
        decoder = build_decoder(cfg.model, encoder, arch)
        if not recipe.fresh_decoder:
            decoder.load_state_dict(load_torch(stock_dir / "decoder.pt"))
    it = cfg.inter_train
    learner = make_learner(recipe, encoder, decoder, it.augment).to(device(cfg.model))
    records = train_ssl(learner, images, steps=steps, batch=it.batch, lr=recipe.lr, head_lr=it.head_lr,
                        weight_decay=it.weight_decay, warmup_frac=it.warmup_frac, ctx=ctx, prefix=prefix)
    out_dir.mkdir(parents=True, exist_ok=True)  # as fine_tune_model: the callee makes its own folder
    save_torch(out_dir / "encoder.pt", cpu_state(encoder))
    return {"final_loss": records[-1][f"{prefix}/loss"] if records else float("nan"), "encoder": encoder,
            "learner": learner}


def _inter_train(cfg, ctx, images: torch.Tensor, names: list[str], steps: int, prefix: str) -> None:
    """Every ingredient in ``names`` for the instance's seed, one after another (one instance per
    seed), each from the same seeded RNG state as if it ran alone."""
    seed = ctx.item["seed"]
    stock_dir = ctx.inputs["pretrain_stock"][str(seed)]
    train, val = (load_splits(ctx.inputs["prepare_data"])[k] for k in ("train", "val"))
    metrics = {}
    for name in names:
        start(seed)
        r = inter_train_one(cfg, name, stock_dir, images, steps, ctx.out_dir / name, ctx, f"{prefix}_{name}")
        encoder = r["encoder"]
        diag = {"final_loss": r["final_loss"],  # label-free diagnostics of the representation, on val
                "knn_val_acc": knn_accuracy(embed(encoder, train["x"]), train["y"], embed(encoder, val["x"]),
                                            val["y"], num_classes=cfg.model.num_classes)}
        diag |= projection_collapse(r["learner"], val["x"])
        metrics |= {f"{name}_{k}": v for k, v in diag.items()}
    ctx.write_metrics(metrics)


def inter_train_stage(cfg, ctx) -> None:
    """Ingredients from the downstream task's clean train + val images (labels never read)."""
    images = downstream_unlabelled(load_splits(ctx.inputs["prepare_data"]))
    _inter_train(cfg, ctx, images, cfg.inter_train.ingredients, cfg.inter_train.steps, prefix="ssl")


def inter_train_shift_stage(cfg, ctx) -> None:
    """Ingredients from unlabelled corrupted *test* images (transductive; never their labels)."""
    images = shift_pool(ctx.inputs["prepare_data"], cfg.data)
    _inter_train(cfg, ctx, images, cfg.robustness.ingredients, cfg.robustness.steps, prefix="ssl_shift")
