"""Training stages for digits: the EDM denoiser and the feature net behind FD-digits."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from components.common.diffusion import EDMDenoiser, MLPNet, edm_loss
from components.common.io import load_torch, save_torch
from components.common.seeds import seed_everything
from components.common.train import fit
from components.steindiff.data import load_npy
from components.steindiff.threads import torch_threads


def random_batches(x: torch.Tensor, batch_size: int, *extra: torch.Tensor):
    """Endless uniformly random minibatches (with replacement across batches)."""
    while True:
        idx = torch.randint(0, x.shape[0], (batch_size,))
        yield (x[idx], *(e[idx] for e in extra)) if extra else x[idx]


# ----------------------------------------------------------------------------- denoiser
def build_denoiser(dim: int, section) -> EDMDenoiser:
    return EDMDenoiser(MLPNet(dim, section.width, section.depth, section.emb_dim), section.sigma_data)


def load_denoiser(model_dir: Path) -> EDMDenoiser:
    blob = load_torch(Path(model_dir) / "edm_denoiser.pt")
    model = EDMDenoiser(MLPNet(**blob["net_args"]), blob["sigma_data"])
    model.load_state_dict(blob["state_dict"])
    return model.eval()


def train_denoiser_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:       # paper profile: a pretrained UNet, loaded and described
        from components.steindiff.images import describe_pretrained_stage

        return describe_pretrained_stage(cfg, ctx)
    with torch_threads(1):
        _train_denoiser_stage(cfg, ctx)


def _train_denoiser_stage(cfg, ctx) -> None:
    s = cfg.denoiser
    seed_everything(s.seed)
    x = torch.from_numpy(load_npy(ctx.inputs["prepare_data"] / "digits_train_x.npy"))
    model = build_denoiser(x.shape[1], s)
    records = fit(model, random_batches(x, s.batch_size),
                  lambda m, batch: edm_loss(m, batch, s.p_mean, s.p_std),
                  steps=s.steps, lr=s.lr, warmup=s.warmup, ctx=ctx, log_every=50,
                  prefix="denoiser")
    net_args = {"dim": x.shape[1], "width": s.width, "depth": s.depth, "emb_dim": s.emb_dim}
    save_torch(ctx.out_dir / "edm_denoiser.pt", {"state_dict": model.state_dict(),
                                                 "net_args": net_args, "sigma_data": s.sigma_data})
    tail = [r["denoiser/loss"] for r in records[-10:]]
    ctx.write_metrics({"final_loss": float(np.mean(tail)),
                       "n_params": sum(p.numel() for p in model.parameters())})


# ----------------------------------------------------------------------------- feature net
class DigitClassifier(nn.Module):
    """MLP classifier; ``features`` (penultimate layer) define FD-digits."""

    def __init__(self, dim: int = 64, hidden: int = 128, feature_dim: int = 32, n_classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.SiLU(), nn.Linear(hidden, feature_dim),
                                  nn.SiLU())
        self.head = nn.Linear(feature_dim, n_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def load_classifier(model_dir: Path) -> DigitClassifier:
    blob = load_torch(Path(model_dir) / "digits_classifier.pt")
    model = DigitClassifier(**blob["net_args"])
    model.load_state_dict(blob["state_dict"])
    return model.eval()


def train_feature_net_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:       # paper profile: reference statistics of a pretrained encoder
        from components.steindiff.images import reference_stats_stage

        return reference_stats_stage(cfg, ctx)
    with torch_threads(1):
        _train_feature_net_stage(cfg, ctx)


def _train_feature_net_stage(cfg, ctx) -> None:
    s = cfg.feature_net
    seed_everything(s.seed)
    data = ctx.inputs["prepare_data"]
    x = torch.from_numpy(load_npy(data / "digits_train_x.npy"))
    y = torch.from_numpy(load_npy(data / "digits_train_y.npy"))
    x_test = torch.from_numpy(load_npy(data / "digits_test_x.npy"))
    y_test = torch.from_numpy(load_npy(data / "digits_test_y.npy"))
    net_args = {"dim": x.shape[1], "hidden": s.hidden, "feature_dim": s.feature_dim}
    model = DigitClassifier(**net_args)

    def loss_fn(m, batch):
        xb, yb = batch
        xb = xb + s.noise_augment * torch.randn_like(xb)
        return nn.functional.cross_entropy(m(xb), yb)

    def eval_fn(m):
        return {"feature_net/test_acc": float((m(x_test).argmax(1) == y_test).float().mean())}

    records = fit(model, random_batches(x, s.batch_size, y), loss_fn, steps=s.steps, lr=s.lr,
                  ctx=ctx, log_every=50, eval_fn=eval_fn, eval_every=s.steps, prefix="feature_net")
    save_torch(ctx.out_dir / "digits_classifier.pt",
               {"state_dict": model.state_dict(), "net_args": net_args})
    ctx.write_metrics({"test_acc": records[-1]["feature_net/test_acc"]})
