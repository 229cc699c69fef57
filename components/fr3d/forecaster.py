"""FR3D-tiny and the token-space baselines, trained by distillation in the frozen teacher's
latent space (targets: the teacher's tokens on the real future frames; no pixel loss).

Variants (same budget: steps, batch, optimiser, schedule):
- ``fr3d``:       spatial masked transformer M_F + pose masked transformer M_z, with
                  bidirectional info-share cross-attention between the two streams.
- ``no_share``:   M_F and M_z without info-share (the paper's "CUT3R-Foresight + M_z").
- ``scene_only``: M_F only (the paper's "CUT3R-Foresight"); no pose forecast.
- ``feat2d``:     M_F on the teacher encoder's stateless 2D features (DINO-Foresight-like),
                  decoded by a depth decoder trained on domain A only.

Masked-token formulation: the context frames' tokens plus one block of mask tokens for the next
frame go through the transformer; the outputs at the mask positions (added to the last context
frame's tokens, so an untrained model copies the last frame) are the forecast.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as fn

from components.common.io import load_torch, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit
from components.fr3d.data import load_split
from components.common.transformer import CrossBlock
from components.fr3d.nn import SelfBlock, grid_embedding
from components.fr3d.teacher import depth_head, silog_loss, unpatchify

POSE_VARIANTS = ("fr3d", "no_share")
VARIANTS = ("fr3d", "no_share", "scene_only", "feat2d")


class Forecaster(nn.Module):
    def __init__(self, token_dim: int, dim: int, spatial_layers: int, pose_layers: int,
                 share_layers: int, heads: int, context: int, use_pose: bool):
        super().__init__()
        self.context, self.dim, self.use_pose = context, dim, use_pose
        self.in_f, self.out_f = nn.Linear(token_dim, dim), nn.Linear(dim, token_dim)
        self.mask_f = nn.Parameter(torch.zeros(dim))
        self.time_f = nn.Parameter(torch.randn(context + 1, dim) * 0.02)
        self.ln_f = nn.LayerNorm(dim)
        self.spatial = nn.ModuleList(SelfBlock(dim, heads) for _ in range(spatial_layers))
        nn.init.zeros_(self.out_f.weight)
        nn.init.zeros_(self.out_f.bias)
        self.n_share = share_layers if use_pose else 0
        if use_pose:
            self.in_z, self.out_z = nn.Linear(token_dim, dim), nn.Linear(dim, token_dim)
            self.mask_z = nn.Parameter(torch.zeros(dim))
            self.time_z = nn.Parameter(torch.randn(context + 1, dim) * 0.02)
            self.ln_z = nn.LayerNorm(dim)
            self.pose = nn.ModuleList(SelfBlock(dim, heads) for _ in range(pose_layers))
            nn.init.zeros_(self.out_z.weight)
            nn.init.zeros_(self.out_z.bias)
            # info-share: pose stream reads the scene, scene stream reads the pose stream
            # (attention only, so the ablation without it differs by few parameters)
            self.share_z = nn.ModuleList(CrossBlock(dim, heads, feed_forward=False)
                                         for _ in range(self.n_share))
            self.share_f = nn.ModuleList(CrossBlock(dim, heads, feed_forward=False)
                                         for _ in range(self.n_share))

    @staticmethod
    def _chunks(n_layers: int, n_chunks: int) -> list[range]:
        bounds = np.linspace(0, n_layers, n_chunks + 1).round().astype(int)
        return [range(bounds[i], bounds[i + 1]) for i in range(n_chunks)]

    def forward(self, f_ctx: torch.Tensor, z_ctx: torch.Tensor | None, grid: tuple[int, int]):
        """f_ctx (B, C, n, D), z_ctx (B, C, D) or None -> (f_next (B, n, D), z_next or None)."""
        b, c, n, _ = f_ctx.shape
        pos = grid_embedding(*grid, self.dim).to(f_ctx)
        xf = torch.cat([self.in_f(f_ctx), self.mask_f.expand(b, 1, n, -1)], 1)
        xf = (xf + pos + self.time_f[:, None]).flatten(1, 2)
        xz = None
        if self.use_pose:
            xz = torch.cat([self.in_z(z_ctx), self.mask_z.expand(b, 1, -1)], 1) + self.time_z
        chunks = max(1, self.n_share)
        for k, (rf, rz) in enumerate(zip(self._chunks(len(self.spatial), chunks),
                                         self._chunks(len(self.pose) if self.use_pose else 0, chunks))):
            for i in rf:
                xf = self.spatial[i](xf)
            for i in rz:
                xz = self.pose[i](xz)
            if k < self.n_share:
                xz, xf = self.share_z[k](xz, xf), self.share_f[k](xf, xz)
        f_next = f_ctx[:, -1] + self.out_f(self.ln_f(xf[:, c * n:]))
        z_next = z_ctx[:, -1] + self.out_z(self.ln_z(xz[:, c])) if self.use_pose else None
        return f_next, z_next


def build(variant: str, fc, token_dim: int) -> Forecaster:
    return Forecaster(token_dim, fc.dim, fc.spatial_layers, fc.pose_layers,
                      fc.share_layers if variant == "fr3d" else 0, fc.heads, fc.context,
                      use_pose=variant in POSE_VARIANTS)


def token_stats(tokens: dict) -> dict[str, torch.Tensor]:
    """Per-channel mean/std of the training domain's tokens (targets are normalised by them)."""
    out = {}
    for key in ("z", "F", "enc"):
        x = tokens[key].float().reshape(-1, tokens[key].shape[-1])
        out[f"{key}_mean"], out[f"{key}_std"] = x.mean(0), x.std(0).clamp(min=1e-4)
    return out


def normalise(x: torch.Tensor, stats: dict, key: str) -> torch.Tensor:
    return (x.float() - stats[f"{key}_mean"]) / stats[f"{key}_std"]


def denormalise(x: torch.Tensor, stats: dict, key: str) -> torch.Tensor:
    return x * stats[f"{key}_std"] + stats[f"{key}_mean"]


def rollout_length(step: int, fc) -> int:
    """AR schedule: 1 step at first, rising linearly to ``fc.rollout`` over ``ar_ramp`` of
    training, so the context holds more and more of the model's own predictions."""
    ramp = max(1, int(fc.ar_ramp * fc.steps))
    return min(fc.rollout, 1 + (fc.rollout * step) // ramp) if fc.rollout > 1 else 1


def rollout(model: Forecaster, f_ctx, z_ctx, grid, n_steps: int, detach: bool = True):
    """Autoregressive forecast: each prediction is appended to the context (sliding window)."""
    fs, zs = [], []
    for _ in range(n_steps):
        f_next, z_next = model(f_ctx, z_ctx, grid)
        fs.append(f_next)
        zs.append(z_next)
        f_in = f_next.detach() if detach else f_next
        f_ctx = torch.cat([f_ctx[:, 1:], f_in[:, None]], 1)
        if z_next is not None:
            z_in = z_next.detach() if detach else z_next
            z_ctx = torch.cat([z_ctx[:, 1:], z_in[:, None]], 1)
    return torch.stack(fs, 1), (torch.stack(zs, 1) if zs[0] is not None else None)


def window_loss(m: Forecaster, f_win, z_win, k: int, fc, grid) -> torch.Tensor:
    """Distillation loss of the k-th autoregressive prediction of a window of context + rollout
    frames: the first k-1 steps feed the model its own (detached, gradient-free) predictions."""
    c = fc.context
    f_ctx, z_ctx = f_win[:, :c], z_win[:, :c]
    if k > 1:
        with torch.no_grad():
            f_prev, z_prev = rollout(m, f_ctx, z_ctx, grid, k - 1)
        f_ctx = torch.cat([f_win[:, k - 1:c], f_prev], 1)[:, -c:]
        z_ctx = torch.cat([z_win[:, k - 1:c], z_prev], 1)[:, -c:] if z_prev is not None else z_ctx
    f_pred, z_pred = m(f_ctx, z_ctx, grid)
    loss = fn.smooth_l1_loss(f_pred, f_win[:, c + k - 1], beta=fc.beta)
    if z_pred is not None:
        loss = loss + fc.pose_weight * fn.smooth_l1_loss(z_pred, z_win[:, c + k - 1], beta=fc.beta)
    return loss


def validation_windows(tokens: dict, stats: dict, key: str, fc) -> tuple[torch.Tensor, torch.Tensor]:
    """One fixed window per validation sequence (the last context + rollout frames)."""
    span = fc.context + fc.rollout
    f = normalise(tokens[key][:, -span:], stats, key)
    return f, normalise(tokens["z"][:, -span:], stats, "z")


def train_forecaster(variant: str, seed: int, fc, tokens: dict, ctx, prefix: str,
                     val_tokens: dict | None = None) -> dict:
    rng = seed_everything(seed)
    stats = token_stats(tokens)
    key = "enc" if variant == "feat2d" else "F"
    f_all = normalise(tokens[key], stats, key)
    z_all = normalise(tokens["z"], stats, "z")
    grid = tuple(tokens["grid"])
    model = build(variant, fc, f_all.shape[-1])
    n, t = f_all.shape[:2]
    span = fc.context + fc.rollout
    step = {"i": 0}

    def batches():
        while True:
            idx = torch.from_numpy(rng.integers(0, n, fc.batch_size))
            start = torch.from_numpy(rng.integers(0, t - span + 1, fc.batch_size))
            sel = start[:, None] + torch.arange(span)[None]
            yield f_all[idx[:, None], sel], z_all[idx[:, None], sel]

    def loss_fn(m, batch):
        # AR training: rollout depth k in 1..r(step), loss on the k-th prediction
        step["i"] += 1
        k = int(rng.integers(1, rollout_length(step["i"], fc) + 1))
        return window_loss(m, *batch, k, fc, grid)

    eval_fn = None
    if val_tokens is not None:
        f_val, z_val = validation_windows(val_tokens, stats, key, fc)

        def eval_fn(m):
            # mean over every rollout depth: the quantity the AR schedule trains
            return {f"{prefix}/val_loss": float(np.mean(
                [window_loss(m, f_val, z_val, k, fc, grid).item() for k in range(1, fc.rollout + 1)]))}

    records = fit(model, batches(), loss_fn, steps=fc.steps, lr=fc.lr, warmup=fc.warmup,
                  weight_decay=0.01, ctx=ctx, prefix=prefix, log_every=fc.log_every,
                  eval_fn=eval_fn, eval_every=fc.log_every * fc.eval_every_logs)
    n_params = sum(p.numel() for p in model.parameters())
    out = {"model": model, "stats": stats, "final_loss": records[-1][f"{prefix}/loss"],
           "n_params": n_params}
    if eval_fn is not None:
        out.update(convergence(records, f"{prefix}/val_loss", fc.steps))
    return out


def convergence(records: list[dict], key: str, steps: int) -> dict[str, float]:
    """Validation loss at the end, and its relative drop over the last quarter of training
    (small: the model had converged within the budget)."""
    curve = [(r["step"], r[key]) for r in records if key in r]
    final = curve[-1][1]
    before = min(curve, key=lambda sv: abs(sv[0] - 0.75 * steps))[1]
    return {"val_loss": final, "val_loss_at_75pct": before,
            "val_last_quarter_drop": (before - final) / final}


def train_depth_decoder(fc, seed: int, tokens: dict, frames: dict, ctx) -> nn.Module:
    """Depth decoder for the 2D-feature baseline: teacher encoder features -> depth, trained
    with GT depth of domain A only (DINO-Foresight trains a dataset-specific head). Its
    architecture is the teacher's depth head (same token-grid context)."""
    rng = seed_everything(seed + 1000)
    stats = token_stats(tokens)
    enc = normalise(tokens["enc"], stats, "enc").flatten(0, 1)
    depth = torch.from_numpy(frames["depth"]).flatten(0, 1)
    grid = tuple(tokens["grid"])
    head = depth_head(enc.shape[-1], int(tokens.get("depth_context", 0)))

    def batches():
        while True:
            idx = torch.from_numpy(rng.integers(0, len(enc), fc.batch_size))
            yield enc[idx], depth[idx]

    def loss_fn(m, batch):
        e, d = batch
        return silog_loss(unpatchify(m(e, grid), *grid), d, (d > 0).float())

    fit(head, batches(), loss_fn, steps=fc.decoder_steps, lr=fc.lr, warmup=fc.warmup,
        ctx=ctx, prefix="decoder", log_every=20)
    return head


def _train_stage(cfg, ctx, variant: str) -> None:
    fc, seed = cfg.forecaster, ctx.item["seed"]
    tokens = load_torch(ctx.inputs["extract_tokens"] / "train.pt")
    val_tokens = load_torch(ctx.inputs["extract_tokens"] / "val.pt")
    out = train_forecaster(variant, seed, fc, tokens, ctx, prefix=f"{variant}", val_tokens=val_tokens)
    blob = {"variant": variant, "state_dict": out["model"].state_dict(), "stats": out["stats"]}
    metrics = {k: out[k] for k in ("final_loss", "n_params", "val_loss", "val_loss_at_75pct",
                                   "val_last_quarter_drop")}
    if variant == "feat2d":
        frames = load_split(ctx.inputs["render"]["train"])
        head = train_depth_decoder(fc, seed, tokens, frames, ctx)
        blob["decoder"] = head.state_dict()
        blob["decoder_context"] = len(head.mix)
        metrics["decoder_params"] = sum(p.numel() for p in head.parameters())
    save_torch(ctx.out_dir / "model.pt", blob)
    write_json_atomic(ctx.out_dir / "convergence.json",
                      {k: out[k] for k in ("val_loss", "val_loss_at_75pct", "val_last_quarter_drop")})
    ctx.write_metrics(metrics)


def train_forecaster_stage(cfg, ctx) -> None:
    _train_stage(cfg, ctx, "fr3d")


def train_baselines_stage(cfg, ctx) -> None:
    _train_stage(cfg, ctx, ctx.item["variant"])


def load_forecaster(path, fc, token_dim: int):
    blob = load_torch(path)
    model = build(blob["variant"], fc, token_dim)
    model.load_state_dict(blob["state_dict"])
    model.eval()
    decoder = None
    if "decoder" in blob:
        decoder = depth_head(token_dim, blob.get("decoder_context", 0))
        decoder.load_state_dict(blob["decoder"])
        decoder.eval()
    return blob["variant"], model, blob["stats"], decoder



