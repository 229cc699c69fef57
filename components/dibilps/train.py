"""Training stages: VAE, contrastive condition encoder, latent cache, latent and pixel diffusion."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from components.common.devices import resolve_device
from components.common.io import load_torch, save_torch
from components.common.seeds import seed_everything
from components.common.train import fit
from components.dibilps.backbones import ARCHS, build, latent_spec, pad_multiple, pixel_spec, vae_spec
from components.dibilps.data import load_normaliser, load_split
from components.dibilps.diffusion import VPSchedule
from components.dibilps.models import CondEncoder, FieldVAE, grid_coords, observation_grid


# ----------------------------------------------------------------------------- helpers
def normalised_fields(data_dir: Path, split: str) -> torch.Tensor:
    """(S, 2, n, n) float32: channel 0 = u, channel 1 = a, both normalised."""
    u, a = load_split(data_dir, split)
    u_n, a_n = load_normaliser(data_dir).encode(u, a)
    return torch.from_numpy(np.stack([u_n, a_n], axis=1).astype(np.float32))


def random_batches(n: int, batch_size: int):
    while True:
        yield torch.randint(0, n, (batch_size,))


def random_point_index(batch: int, n: int, k: int) -> torch.Tensor:
    """(batch, k) distinct random node indices per row (flattened row-major), on the CPU
    (the CPU generator keeps the draws the same on every device)."""
    return torch.rand(batch, n * n).argsort(dim=1)[:, :k]


def stage_device(cfg) -> torch.device:
    return resolve_device(cfg.paper.device)


def mask_to_index(masks: np.ndarray) -> torch.Tensor:
    """Fixed boolean masks (S, n, n) with equal counts -> (S, k) flattened node indices."""
    return torch.from_numpy(np.stack([np.flatnonzero(m) for m in masks]))


def gather_points(field: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """field (B, n, n), idx (B, k) -> coords (B, k, 2), values (B, k)."""
    n = field.shape[-1]
    idx = idx.to(field.device)
    coords = grid_coords(n, field.device)[idx]
    return coords, field.flatten(1).gather(1, idx)


def observed_points(fields: torch.Tensor, idx: torch.Tensor,
                    direction: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Coordinates and values of the observed field: a for direction +1, u for -1."""
    coords, u_vals = gather_points(fields[:, 0], idx)
    _, a_vals = gather_points(fields[:, 1], idx)
    return coords, torch.where(direction.view(-1, 1) > 0, a_vals, u_vals)


def lift_sigma(n_points: int, width: float) -> float:
    """Kernel width of the lifting: a fraction of the mean spacing 1/sqrt(P) of the points."""
    return width / math.sqrt(n_points)


def observation_tokens(encoder: CondEncoder, fields: torch.Tensor, idx: torch.Tensor,
                       direction: torch.Tensor) -> torch.Tensor:
    """Point tokens of the observed field: sparse a for direction +1 (forward), sparse u for -1."""
    coords, u_vals = gather_points(fields[:, 0], idx)
    _, a_vals = gather_points(fields[:, 1], idx)
    tok_a = encoder.tokens("a", coords, a_vals)
    tok_u = encoder.tokens("u", coords, u_vals)
    return torch.where(direction.view(-1, 1, 1) > 0, tok_a, tok_u)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _tail_mean(records, key: str) -> float:
    return float(np.mean([r[key] for r in records[-5:]]))


def convergence(records, key: str) -> dict:
    """Mean logged loss over the last and the second-to-last fifth of training: a plateau
    (ratio near 1) says the budget trained the model out, a falling loss says it did not."""
    losses = np.array([r[key] for r in records])
    k = max(1, len(losses) // 5)
    last, prev = float(losses[-k:].mean()), float(losses[-2 * k:-k].mean()) if len(losses) >= 2 * k else float("nan")
    return {"loss_last_fifth": last, "loss_prev_fifth": prev, "loss_plateau_ratio": last / prev}


def save_model(path: Path, model: torch.nn.Module, args: dict, **extra) -> None:
    """State dict (on the CPU) + constructor args + class name, so any stage rebuilds it."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_torch(path, {"state_dict": state, "args": args, "arch": type(model).__name__, **extra})


def load_model(path: Path, cls, device: torch.device | str = "cpu"):
    """The saved network; ``cls`` is the default for checkpoints without a class name."""
    blob = load_torch(path)
    model = ARCHS.get(blob.get("arch"), cls)(**blob["args"])
    model.load_state_dict(blob["state_dict"])
    return model.to(device).eval(), blob


# ----------------------------------------------------------------------------- VAE
def train_vae_stage(cfg, ctx) -> None:
    s, pde, device = cfg.vae, ctx.item["pde"], stage_device(cfg)
    seed_everything(s.seed)
    x = normalised_fields(ctx.inputs["generate_pde_data"][pde], "train").to(device)
    spec = vae_spec(cfg, int(x.shape[-1]))
    args = spec[1]
    vae = build(spec).to(device)
    records = fit(vae, (x[i] for i in random_batches(len(x), s.batch_size)),
                  lambda m, b: m(b, s.kl_weight), steps=s.steps, lr=s.lr, warmup=min(50, s.steps // 10),
                  ctx=ctx, log_every=20, prefix="vae")
    vae.eval()
    val = normalised_fields(ctx.inputs["generate_pde_data"][pde], "val").to(device)
    with torch.no_grad():
        rec = torch.cat([vae.decode(vae.encode(val[i:i + 64])[0], val.shape[-1])
                         for i in range(0, len(val), 64)])
    rel = ((rec - val).flatten(2).norm(dim=2) / val.flatten(2).norm(dim=2)).mean(dim=0)
    save_model(ctx.out_dir / "vae.pt", vae, args)
    ctx.write_metrics({"final_loss": _tail_mean(records, "vae/loss"), "n_params": n_params(vae),
                       **convergence(records, "vae/loss"),
                       "val_rel_l2_u": float(rel[0]), "val_rel_l2_a": float(rel[1])})


def load_vae(folder: Path, device: torch.device | str = "cpu") -> torch.nn.Module:
    return load_model(Path(folder) / "vae.pt", FieldVAE, device)[0]


# ----------------------------------------------------------------------------- condition encoder
def train_cond_encoder_stage(cfg, ctx) -> None:
    s, pde, device = cfg.cond_encoder, ctx.item["pde"], stage_device(cfg)
    seed_everything(s.seed)
    x = normalised_fields(ctx.inputs["generate_pde_data"][pde], "train").to(device)
    n = x.shape[-1]
    from components.dibilps.data import n_observed
    k = n_observed(n, cfg.masks.obs_fraction)
    args = {"d_model": s.d_model, "n_layers": s.n_layers, "n_heads": s.n_heads,
            "embed_dim": s.embed_dim, "temperature_init": s.temperature_init}
    enc = CondEncoder(**args).to(device)
    accs: list[float] = []

    def loss_fn(model, idx):
        b = x[idx]
        pts = random_point_index(len(b), n, k)     # training masks are fresh every batch
        coords, u_vals = gather_points(b[:, 0], pts)
        _, a_vals = gather_points(b[:, 1], pts)
        loss, acc = model.info_nce(coords, u_vals, a_vals)
        accs.append(float(acc))
        return loss

    records = fit(enc, random_batches(len(x), s.batch_size), loss_fn, steps=s.steps, lr=s.lr,
                  weight_decay=1e-2, warmup=min(50, s.steps // 10), ctx=ctx, log_every=20,
                  prefix="encoder")
    # retrieval accuracy on val (fixed-size batch of val fields, fresh random points)
    val = normalised_fields(ctx.inputs["generate_pde_data"][pde], "val").to(device)
    g = torch.Generator().manual_seed(0)
    pts = torch.rand(len(val), n * n, generator=g).argsort(dim=1)[:, :k]
    coords, u_vals = gather_points(val[:, 0], pts)
    _, a_vals = gather_points(val[:, 1], pts)
    with torch.no_grad():
        _, val_acc = enc.info_nce(coords, u_vals, a_vals)
    save_model(ctx.out_dir / "encoder.pt", enc, args)
    ctx.write_metrics({"final_loss": _tail_mean(records, "encoder/loss"),
                       "train_retrieval_acc": float(np.mean(accs[-20:])),
                       "val_retrieval_acc": float(val_acc), "val_batch": int(len(val)),
                       "n_params": n_params(enc)})


def load_encoder(folder: Path, device: torch.device | str = "cpu") -> CondEncoder:
    return load_model(Path(folder) / "encoder.pt", CondEncoder, device)[0]


# ----------------------------------------------------------------------------- latents
def encode_latents_stage(cfg, ctx) -> None:
    pde, device = ctx.item["pde"], stage_device(cfg)
    vae = load_vae(ctx.inputs["train_vae"][pde], device)
    data_dir = ctx.inputs["generate_pde_data"][pde]
    x = normalised_fields(data_dir, "train")

    def encode(f):
        with torch.no_grad():
            return torch.cat([vae.encode(f[i:i + 256].to(device))[0].cpu() for i in range(0, len(f), 256)])

    z = encode(x)
    scale = float(1.0 / z.std())          # the role of SD's 0.18215, measured on our latents
    # val latents: the denoiser's held-out loss with / without its condition (a diagnostic)
    save_torch(ctx.out_dir / "latents.pt", {"z": z * scale, "scale": scale,
                                            "z_val": encode(normalised_fields(data_dir, "val")) * scale})
    ctx.write_metrics({"latent_shape": list(z.shape[1:]), "scale": scale,
                       "latent_dims": int(z[0].numel()), "field_dims": int(x[0].numel())})


# ----------------------------------------------------------------------------- diffusion
def schedule_from(cfg) -> VPSchedule:
    d = cfg.diffusion
    return VPSchedule(d.train_timesteps, d.beta_start, d.beta_end)


class ConditionedDenoiser(torch.nn.Module):
    """The latent denoiser and the point-set towers trained together: the towers start from the
    contrastive encoder and are fine-tuned by the diffusion loss (``finetune_encoder``), so the
    observation tokens carry what the denoiser needs, not only what aligns u with a. With
    ``grid_channels`` the observations are also lifted to the latent grid (kernel ``sigma``)."""

    def __init__(self, net: torch.nn.Module, encoder: CondEncoder, side: int, sigma: float):
        super().__init__()
        self.net, self.encoder, self.side, self.sigma = net, encoder, side, sigma

    def cond(self, fields, idx, direction, drop=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(tokens, grid) for ``net(z, t, tokens, grid)``; dropped rows get the null of both."""
        tokens = self.net.condition(observation_tokens(self.encoder, fields, idx, direction),
                                    direction, drop)
        if not self.net.grid_channels:
            return tokens, None
        coords, values = observed_points(fields, idx, direction)
        grid = observation_grid(coords, values, direction, self.side, fields.shape[-1], self.sigma)
        return tokens, self.net.drop_grid(grid, drop)

    def null_cond(self, direction, n_points: int) -> tuple[torch.Tensor, None]:
        return self.net.condition(None, direction, n_points=n_points), None


def held_out_condition_losses(model: ConditionedDenoiser, sched: VPSchedule, z_val, x_val, k: int,
                              n_draws: int = 4) -> dict:
    """Validation ε-loss of the trained denoiser with the sample's own observations, with
    another sample's (rolled by one) and with none (null): a denoiser that uses its condition
    has conditional < shuffled ~ null. Fixed draws (t, noise, points, direction) per call."""
    g = torch.Generator().manual_seed(0)
    out = {"conditional": 0.0, "shuffled": 0.0, "null": 0.0}
    model.eval()
    with torch.no_grad():
        for _ in range(n_draws):
            b, n = len(z_val), x_val.shape[-1]
            t = torch.randint(0, sched.n, (b,), generator=g).to(z_val.device)
            eps = torch.randn(z_val.shape, generator=g).to(z_val.device)
            idx = torch.rand(b, n * n, generator=g).argsort(dim=1)[:, :k]
            direction = torch.where(torch.rand(b, generator=g) < 0.5, 1.0, -1.0).to(z_val.device)
            z_t = sched.q_sample(z_val, t, eps)
            conds = {"conditional": model.cond(x_val, idx, direction),
                     "shuffled": model.cond(x_val.roll(1, 0), idx, direction),
                     "null": model.null_cond(direction, k)}
            for name, c in conds.items():
                out[name] += float(((model.net(z_t, t, *c) - eps) ** 2).mean()) / n_draws
    return {f"val_loss_{k_}": v for k_, v in out.items()} | {
        "val_loss_ratio_cond_vs_null": out["conditional"] / out["null"]}


def train_latent_diffusion_stage(cfg, ctx) -> None:
    d, pde, device = cfg.diffusion, ctx.item["pde"], stage_device(cfg)
    seed_everything(d.seed)
    blob = load_torch(ctx.inputs["encode_latents"][pde] / "latents.pt")
    z = blob["z"].to(device)
    data_dir = ctx.inputs["generate_pde_data"][pde]
    x = normalised_fields(data_dir, "train").to(device)
    encoder = load_encoder(ctx.inputs["train_cond_encoder"][pde], device)
    for p in encoder.parameters():
        p.requires_grad_(d.finetune_encoder)
    from components.dibilps.data import n_observed
    n, k = x.shape[-1], n_observed(x.shape[-1], cfg.masks.obs_fraction)
    spec = latent_spec(cfg, int(z.shape[1]), encoder.d_model, int(z.shape[-1]))
    args = spec[1]
    sigma = lift_sigma(k, d.lift_width)
    model = ConditionedDenoiser(build(spec), encoder, int(z.shape[-1]), sigma).to(device)
    sched = schedule_from(cfg)

    def loss_fn(m, idx):
        direction = torch.where(torch.rand(len(idx)) < 0.5, 1.0, -1.0).to(device)  # forward / inverse 50:50
        drop = (torch.rand(len(idx)) < d.cond_dropout).to(device)                  # unconditional rows
        with torch.set_grad_enabled(d.finetune_encoder):
            tokens, grid = m.cond(x[idx], random_point_index(len(idx), n, k), direction, drop)
        return sched.loss(m.net, z[idx], tokens, grid)

    records = fit(model, random_batches(len(z), d.batch_size), loss_fn, steps=d.latent_steps,
                  lr=d.lr, warmup=min(100, d.latent_steps // 10), ctx=ctx, log_every=25,
                  prefix="latent_diffusion")
    held_out = held_out_condition_losses(model, sched, blob["z_val"].to(device),
                                         normalised_fields(data_dir, "val").to(device), k)
    save_model(ctx.out_dir / "latent_unet.pt", model.net, args, lift_sigma=sigma)
    save_model(ctx.out_dir / "encoder.pt", model.encoder, load_torch(
        ctx.inputs["train_cond_encoder"][pde] / "encoder.pt")["args"])
    ctx.write_metrics({"final_loss": _tail_mean(records, "latent_diffusion/loss"),
                       "first_loss": float(records[0]["latent_diffusion/loss"]),
                       **convergence(records, "latent_diffusion/loss"), **held_out,
                       "lift_sigma": sigma, "n_params": n_params(model.net)})


def train_pixel_diffusion_stage(cfg, ctx) -> None:
    """Baseline: unconditional joint (u, a) diffusion in pixel space (DiffusionPDE-style),
    the same VP schedule, conv UNet of the same width; guided with the same sampler."""
    d, pde, device = cfg.diffusion, ctx.item["pde"], stage_device(cfg)
    seed_everything(d.seed)
    x = normalised_fields(ctx.inputs["generate_pde_data"][pde], "train").to(device)
    spec = pixel_spec(cfg, int(x.shape[-1]))
    args = spec[1]
    net = build(spec).to(device)
    sched = schedule_from(cfg)
    pad = (-x.shape[-1]) % pad_multiple(net)
    xp = torch.nn.functional.pad(x, (0, pad, 0, pad), mode="replicate") if pad else x
    records = fit(net, random_batches(len(xp), d.batch_size),
                  lambda m, idx: sched.loss(m, xp[idx]), steps=d.pixel_steps, lr=d.lr,
                  warmup=min(100, d.pixel_steps // 10), ctx=ctx, log_every=25, prefix="pixel_diffusion")
    save_model(ctx.out_dir / "pixel_unet.pt", net, args)
    ctx.write_metrics({"final_loss": _tail_mean(records, "pixel_diffusion/loss"),
                       **convergence(records, "pixel_diffusion/loss"), "n_params": n_params(net)})
