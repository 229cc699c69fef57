"""Re2IC-lite: an overfitted per-image codec with region modulation, trained for
rate + lambda * {MSE, WD, WA-WD}, then written to a real bitstream.

Decoder = multi-resolution integer latent grids, bilinearly upsampled and stacked with seeded
noise (common randomness), fed to a tiny shared ("global") synthesis MLP whose hidden layer
is scaled/shifted per saliency region ("local" modulation), plus a 3x3 refinement conv.
Entropy model = one discretised zero-mean Laplace per latent level (factorised, no ARM).
"""
from __future__ import annotations

import itertools
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from components.common.devices import resolve_device
from components.common.io import read_json, write_bytes_atomic, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit
from components.re2ic import coder
from components.re2ic.images import blocks_to_pixels
from components.re2ic.features import make_features
from components.re2ic.wd import WDToTarget

_HEADER = struct.Struct("<HHBBBBBib")  # H, W, levels, hidden, noise ch, regions, block, seed, wstep


class Re2ICCodec(nn.Module):
    def __init__(self, height: int, width: int, levels: int, hidden: int, noise_channels: int,
                 n_regions: int = 2) -> None:
        super().__init__()
        self.size = (height, width)
        self.latents = nn.ParameterList(
            [nn.Parameter(torch.zeros(1, 1, height >> k, width >> k)) for k in range(levels)])
        self.log_scales = nn.Parameter(torch.zeros(levels))
        self.synth_in = nn.Conv2d(levels + noise_channels, hidden, 1)
        self.region_film = nn.Parameter(torch.zeros(n_regions, 2, hidden))
        self.synth_out = nn.Conv2d(hidden, 3, 1)
        self.refine = nn.Conv2d(3, 3, 3, padding=1, padding_mode="replicate")
        with torch.no_grad():
            self.synth_out.bias.fill_(0.5)
            self.refine.weight.mul_(0.1)

    def synthesis_parameters(self) -> list[torch.Tensor]:
        """What the bitstream carries besides the latents, in a fixed order."""
        return [self.synth_in.weight, self.synth_in.bias, self.region_film,
                self.synth_out.weight, self.synth_out.bias, self.refine.weight, self.refine.bias]

    def region_onehot(self, regions: torch.Tensor) -> torch.Tensor:
        """(1, 1, H, W) integer region map -> (n_regions, H*W) one-hot rows (constant per image:
        a fit computes it once)."""
        return F.one_hot(regions.reshape(-1), self.region_film.shape[0]).t().to(self.region_film.dtype)

    def synthesize(self, latents, regions: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """``regions``: the integer region map, or its ``region_onehot``. The 1x1 layers run as
        matrix products on a (channels, pixels) view: the same maps as the convolutions they
        hold the weights of, at a fraction of the CPU cost of a 1x1 convolution's backward."""
        (h, w), hidden = self.size, self.synth_in.out_channels
        onehot = self.region_onehot(regions) if not regions.is_floating_point() else regions
        ups = [y if y.shape[-2:] == self.size else
               F.interpolate(y, size=self.size, mode="bilinear", align_corners=False)
               for y in latents]
        x = torch.cat(ups + [noise], 1).reshape(-1, h * w)                          # (C_in, HW)
        hid = torch.addmm(self.synth_in.bias[:, None], self.synth_in.weight.flatten(1), x)
        # per-region scale/shift: (2*hidden, R) @ one-hot (R, HW)
        film = self.region_film.flatten(1).t() @ onehot
        hid = F.relu(hid * (1 + film[:hidden]) + film[hidden:])
        out = torch.addmm(self.synth_out.bias[:, None], self.synth_out.weight.flatten(1), hid)
        out = out.reshape(1, 3, h, w)
        return out + self.refine(out)

    def rate_bits(self, latents_hat) -> torch.Tensor:
        """Bits of all latent levels under their Laplace scales, in one pass over the
        concatenated levels (each level's scale repeated over its entries)."""
        flat = torch.cat([y.reshape(-1) for y in latents_hat])
        counts = torch.tensor([y.numel() for y in latents_hat], device=flat.device)
        scales = torch.repeat_interleave(torch.exp(self.log_scales).clamp(min=0.05), counts)
        return laplace_bits(flat, scales).sum()


def laplace_bits(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """-log2 P(integer bin around y) under a zero-mean Laplace; uses |y| for stability."""
    a = y.abs()
    upper = torch.where(a < 0.5, 1 - 0.5 * torch.exp(-(0.5 - a) / scale),
                        0.5 * torch.exp(-(a - 0.5) / scale))
    lower = 0.5 * torch.exp(-(a + 0.5) / scale)
    return -torch.log2((upper - lower).clamp(min=1e-9))


def macs_per_pixel(levels: int, hidden: int, noise_channels: int) -> int:
    """Decoder MACs per pixel: bilinear upsampling (4 per coarse level), the two 1x1 layers,
    the region modulation (2 per hidden unit) and the 3x3 3->3 refinement."""
    return 4 * (levels - 1) + (levels + noise_channels) * hidden + 2 * hidden + hidden * 3 + 81


# HiFiC's decoder (Mentzer et al., NeurIPS 2020) as its official code builds it with the paper's
# defaults (github.com/tensorflow/compression, models/hific/archs.py: Decoder(num_up=4,
# num_filters_base=60, num_residual_blocks=9), latents of 220 channels at 1/16 resolution;
# Hyperprior(num_filters=320) with two synthesis stacks, mean and scale, from 1/64 resolution).
# (kind, kernel, in channels, out channels, log2 of the input's downsampling factor)
_HIFIC_GENERATOR = (
    [("conv", 3, 220, 960, 4)] + [("conv", 3, 960, 960, 4)] * 18 +       # head, 9 residual blocks
    [("tconv", 3, 60 * 2 ** (s + 1), 60 * 2 ** s, s + 1) for s in reversed(range(4))] +
    [("conv", 7, 60, 3, 0)])
_HIFIC_HYPER_SYNTHESIS = [("tconv", 5, 320, 320, 6), ("tconv", 5, 320, 320, 5), ("conv", 3, 320, 220, 4)]


def hific_decoder_macs_per_pixel(hyper: bool = True) -> float:
    """Multiply-accumulates per decoded pixel of HiFiC's convolutions (norms, activations and
    biases not counted, as in ``macs_per_pixel``): a stride-1 convolution costs k^2 C_in C_out
    per output position, a stride-2 transposed one k^2 C_in C_out per input position; either
    way per position of its input grid, which has 4^-down positions per pixel."""
    layers = _HIFIC_GENERATOR + (2 * _HIFIC_HYPER_SYNTHESIS if hyper else [])
    return float(sum(k * k * c_in * c_out / 4 ** down for _kind, k, c_in, c_out, down in layers))


def make_distortion(loss: str, target: torch.Tensor, log2_sigma: torch.Tensor,
                    log2_sigma_uniform: torch.Tensor, dcfg):
    if loss == "mse":
        return lambda x_hat: (x_hat - target).square().mean()
    features = make_features(dcfg).to(target.device)
    with torch.no_grad():
        target_feats = features(target)
    if loss in ("wd", "wd_uniform"):
        sigma = log2_sigma if loss == "wd" else log2_sigma_uniform
        to_target = WDToTarget(target_feats, sigma, dcfg.num_levels)
    elif loss == "wawd":
        to_target = WDToTarget(target_feats, log2_sigma, dcfg.num_levels, dcfg.band_weights)
    else:
        raise ValueError(f"unknown loss {loss!r} (mse, wd, wawd, wd_uniform)")
    return lambda x_hat: to_target(features(x_hat))


def common_noise(seed: int, channels: int, size) -> torch.Tensor:
    return torch.randn(1, channels, *size, generator=torch.Generator().manual_seed(seed))


def train_codec(model: Re2ICCodec, distortion, regions, noise, lam: float, ccfg, ctx=None,
                prefix: str = "fit"):
    """rate (bpp) + lambda * D. First a uniform-noise proxy of rounding, then
    straight-through rounding so the latents settle on what will be coded."""
    pixels = model.size[0] * model.size[1]
    noise_steps = int(ccfg.noise_phase * ccfg.iterations)

    regions = model.region_onehot(regions) if not regions.is_floating_point() else regions

    def loss_fn(m, step):
        if step < noise_steps:
            latents = [y + torch.rand_like(y) - 0.5 for y in m.latents]
        else:
            latents = [y + (torch.round(y) - y).detach() for y in m.latents]
        return m.rate_bits(latents) / pixels + lam * distortion(m.synthesize(latents, regions, noise))

    return fit(model, itertools.count(), loss_fn, steps=ccfg.iterations, lr=ccfg.lr,
               optimizer=torch.optim.Adam(model.parameters(), lr=ccfg.lr, foreach=True), grad_clip=None,
               ctx=ctx, log_every=ccfg.log_every, prefix=prefix)


# ---- bitstream ----------------------------------------------------------------------

def quantise_model(model: Re2ICCodec, weight_step_log2: int):
    latents = [torch.round(y.detach()).to(torch.int64).numpy()[0, 0] for y in model.latents]
    step = 2.0 ** weight_step_log2
    weights = [torch.round(w.detach() / step).to(torch.int64).numpy() for w in model.synthesis_parameters()]
    scales = [coder.quantise_log2_scale(float(torch.exp(b.detach()))) for b in model.log_scales]
    return latents, weights, scales


def write_bitstream(model: Re2ICCodec, blocks: np.ndarray, block: int, noise_seed: int,
                    weight_step_log2: int) -> tuple[bytes, dict]:
    latents, weights, scales = quantise_model(model, weight_step_log2)
    h, w = model.size
    flat_w = np.concatenate([x.ravel() for x in weights])
    w_scale = coder.quantise_log2_scale(max(float(np.abs(flat_w).mean()), 0.1))
    header = _HEADER.pack(h, w, len(latents), model.synth_in.out_channels,
                          model.synth_in.in_channels - len(latents), model.region_film.shape[0],
                          block, noise_seed, weight_step_log2)
    max_abs = [int(np.abs(y).max()) for y in latents] + [int(np.abs(flat_w).max())]
    header += struct.pack(f"<{len(scales) + 1}h", *scales, w_scale)
    header += struct.pack(f"<{len(max_abs)}H", *max_abs)
    mask = np.packbits(blocks.ravel().astype(np.uint8)).tobytes()
    enc = coder.ArithmeticEncoder()
    for y, s, m in zip(latents, scales, max_abs):
        coder.encode_ints(enc, y, coder.scale_from_code(s), m)
    coder.encode_ints(enc, flat_w, coder.scale_from_code(w_scale), max_abs[-1])
    payload = enc.finish()
    parts = {"header_bytes": len(header), "mask_bytes": len(mask), "payload_bytes": len(payload),
             "ideal_latent_bits": sum(coder.ideal_bits(y, coder.scale_from_code(s), m)
                                      for y, s, m in zip(latents, scales, max_abs)),
             "ideal_weight_bits": coder.ideal_bits(flat_w, coder.scale_from_code(w_scale), max_abs[-1]),
             "n_weights": int(flat_w.size)}
    return header + mask + payload, {"latents": latents, "weights": flat_w, **parts}


def read_bitstream(data: bytes) -> dict:
    """Everything the decoder needs comes from the bytes (plus the codec's fixed layout)."""
    h, w, levels, hidden, noise_ch, n_regions, block, seed, wstep = _HEADER.unpack_from(data)
    pos = _HEADER.size
    codes = struct.unpack_from(f"<{levels + 1}h", data, pos)
    pos += 2 * (levels + 1)
    max_abs = struct.unpack_from(f"<{levels + 1}H", data, pos)
    pos += 2 * (levels + 1)
    n_blocks = (h // block) * (w // block)
    mask_len = (n_blocks + 7) // 8
    blocks = np.unpackbits(np.frombuffer(data[pos:pos + mask_len], dtype=np.uint8))[:n_blocks]
    dec = coder.ArithmeticDecoder(data[pos + mask_len:])
    latents = [coder.decode_ints(dec, (h >> k) * (w >> k), coder.scale_from_code(codes[k]),
                                 max_abs[k]).reshape(h >> k, w >> k) for k in range(levels)]
    model = Re2ICCodec(h, w, levels, hidden, noise_ch, n_regions)
    n_weights = sum(p.numel() for p in model.synthesis_parameters())
    weights = coder.decode_ints(dec, n_weights, coder.scale_from_code(codes[-1]), max_abs[-1])
    return {"model": model, "latents": latents, "weights": weights, "weight_step_log2": wstep,
            "blocks": blocks.reshape(h // block, w // block), "block": block, "noise_seed": seed}


def reconstruct(model: Re2ICCodec, latents, weights: np.ndarray, weight_step_log2: int,
                blocks: np.ndarray, block: int, noise_seed: int) -> np.ndarray:
    """Decoder-side synthesis from integers only (shared by encoder check and decoder)."""
    step, offset = 2.0 ** weight_step_log2, 0
    with torch.no_grad():
        for p in model.synthesis_parameters():
            p.copy_(torch.from_numpy(weights[offset:offset + p.numel()]).reshape(p.shape) * step)
            offset += p.numel()
        ys = [torch.from_numpy(y).float()[None, None] for y in latents]
        regions = torch.from_numpy(blocks_to_pixels(blocks, block).astype(np.int64))[None, None]
        noise = common_noise(noise_seed, model.synth_in.in_channels - len(ys), model.size)
        out = model.synthesize(ys, regions, noise)
    return out.clamp(0, 1)[0].permute(1, 2, 0).numpy()


# ---- stages --------------------------------------------------------------------------

def fit_one(rgb: np.ndarray, regions: dict, name: str, loss: str, lam: float, seed: int,
            noise_seed: int, cfg, ctx=None, prefix: str = "fit") -> tuple[bytes, np.ndarray, dict]:
    """Overfit one codec to one crop; returns its bitstream, the encoder-side reconstruction
    (from the quantised integers, as the decoder will see it) and a log record."""
    seed_everything(seed)
    ccfg, block = cfg.codec, cfg.regions.block
    device = resolve_device(ccfg.device)     # training only: coding and decoding run on CPU

    def tensor(array, dtype=None):
        return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(device)

    target = tensor(rgb).permute(2, 0, 1)[None]
    blocks = regions[f"{name}/blocks"]
    region_px = tensor(blocks_to_pixels(blocks, block), np.int64)[None, None]
    sigma = tensor(regions[f"{name}/log2_sigma"])[None, None]
    sigma_u = tensor(regions[f"{name}/log2_sigma_uniform"])[None, None]
    distortion = make_distortion(loss, target, sigma, sigma_u, cfg.distortion)
    h, w = rgb.shape[:2]
    model = Re2ICCodec(h, w, ccfg.latent_levels, ccfg.hidden, ccfg.noise_channels).to(device)
    noise = common_noise(noise_seed, ccfg.noise_channels, (h, w)).to(device)
    start = time.time()
    records = train_codec(model, distortion, region_px, noise, lam, ccfg, ctx, prefix)
    model = model.cpu()
    data, parts = write_bitstream(model, blocks, block, noise_seed, ccfg.weight_step_log2)
    recon = reconstruct(model, parts["latents"], parts["weights"], ccfg.weight_step_log2,
                        blocks, block, noise_seed)
    log = {"bits": 8 * len(data), "bpp": 8 * len(data) / (h * w),
           "final_loss": records[-1][f"{prefix}/loss"], "fit_seconds": time.time() - start,
           "curve": [r[f"{prefix}/loss"] for r in records],
           **{k: v for k, v in parts.items() if k not in ("latents", "weights")}}
    return data, recon, log


def fit_codec_stage(cfg, ctx) -> None:
    """One item = one (loss, seed): every crop (test and validation) at every lambda of the
    loss, so that an item's rate-distortion curves share one seed."""
    torch.set_num_threads(1)
    loss, seed = ctx.item["loss"], int(ctx.item["seed"])
    crops = dict(np.load(ctx.inputs["load_images"] / "images.npz"))
    regions = dict(np.load(ctx.inputs["saliency"] / "regions.npz"))
    validation = read_json(ctx.inputs["load_images"] / "images.json")["validation"]
    names = crops_to_fit(list(crops), validation, seed, cfg.seeds, cfg.codec.validation_seeds)
    lambdas = cfg.codec.lambdas[loss]
    # i is the crop's index among all crops, so a crop's noise seed does not depend on which
    # crops this item fits
    log, jobs = {}, [(i, name, lam) for i, name in enumerate(crops) if name in names for lam in lambdas]
    for done, (i, name, lam) in enumerate(jobs, 1):
        data, recon, record = fit_one(crops[name], regions, name, loss, float(lam), seed,
                                      noise_seed=seed * 1000 + i, cfg=cfg, ctx=ctx,
                                      prefix=f"fit/{name}/lam{lam:g}")
        stem = f"{name}__lam{lam:g}"
        write_bytes_atomic(ctx.out_dir / f"{stem}.bin", data)
        np.save(ctx.out_dir / f"{stem}_encoder_recon.npy", recon)
        log[stem] = {"image": name, "lam": float(lam), **record}
        ctx.progress(done, len(jobs), f"{stem}: {record['bpp']:.3f} bpp")
    write_json_atomic(ctx.out_dir / "fit_log.json", log)
    ctx.write_metrics({"mean_bpp": float(np.mean([v["bpp"] for v in log.values()])),
                       "max_final_loss_change": max(_tail_change(v["curve"]) for v in log.values())})


def crops_to_fit(names: list[str], validation: list[str], seed: int, seeds: list[int],
                 validation_seeds: int) -> list[str]:
    """Every test crop; the validation crops only on the first ``validation_seeds`` seeds
    (0 = every seed): they serve the premise checks, not the claims."""
    on_validation = validation_seeds <= 0 or seed in list(seeds)[:validation_seeds]
    return [n for n in names if on_validation or n not in validation]


def _tail_change(curve: list[float]) -> float:
    """Relative change of the logged loss over the last fifth of the fit: a convergence
    check (small = the fit had flattened out). A curve of one point shows no flattening, so
    it counts as unconverged (infinite change) rather than failing on the index."""
    if len(curve) < 2:
        return float("inf")
    k = max(1, len(curve) // 5)
    return float(abs(curve[-1 - k] - curve[-1]) / max(abs(curve[-1]), 1e-12))
