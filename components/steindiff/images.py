"""The paper profile's image arm, run by the same stages as the digits arm of the small profile
(train_denoiser, train_feature_net, sample_digits, evaluate dispatch here when paper.enabled):

- train_denoiser: nothing is trained; the pretrained UNet is loaded, run once as D(x, σ) and
  described (``pretrained.json``);
- train_feature_net: the reference statistics (mu, sigma) in the feature model's space, from
  the user's ``.npz`` or computed from the reference images;
- sample_digits: the same solver x steps x correction grid, in batches of ``paper.batch_size``
  (γ is a statistic of one batch, as in the paper's Algorithm 1), samples stored as uint8;
- evaluate: the Fréchet distance of every sample set to the reference statistics.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch

from components.common.devices import resolve_device, resolve_dtype
from components.common.diffusion import make_sigmas
from components.common.io import write_json_atomic, write_table
from components.common.seeds import seed_everything
from components.steindiff.features import FeatureModel, reference_features
from components.steindiff.pretrained import (load_autoencoder, load_unet_denoiser, resolve_layout,
                                             to_uint8_images)
from components.steindiff.quality import feature_stats, frechet_from_stats
from components.steindiff.solvers import nfe

DATASET = "images"


def _device_dtype(paper) -> tuple[torch.device, torch.dtype]:
    device = resolve_device(paper.device)
    return device, resolve_dtype(device, paper.dtype)


# ----------------------------------------------------------------------------- train_denoiser
def describe_pretrained_stage(cfg, ctx) -> None:
    """Load the UNet, run it once as D(x, σ) at a high and a low noise level, record what it is."""
    p = cfg.paper
    device, dtype = _device_dtype(p)
    denoiser = load_unet_denoiser(p, device, dtype)
    shape = denoiser.sample_shape
    x = torch.randn((2, *shape), generator=torch.Generator().manual_seed(0)).to(device)
    if denoiser.num_classes:
        denoiser.class_labels = torch.zeros(2, dtype=torch.long, device=device)
    with torch.no_grad():
        finite = all(bool(torch.isfinite(denoiser(s * x, s)).all()) for s in (80.0, 0.05))
    if not finite:
        raise RuntimeError(f"paper.checkpoint {p.checkpoint}: D(x, σ) is not finite")
    info = {"checkpoint": p.checkpoint, "unet_class": type(denoiser.unet).__name__,
            "parameterization": p.parameterization, "prediction_type": denoiser.prediction_type,
            "sample_shape": list(shape), "num_classes": denoiser.num_classes,
            "autoencoder": str(resolve_layout(Path(p.checkpoint).expanduser(), p.vae).autoencoder or ""),
            "device": str(device), "dtype": str(dtype)}
    write_json_atomic(ctx.out_dir / "pretrained.json", info)
    ctx.write_metrics({"n_params": sum(t.numel() for t in denoiser.unet.parameters()),
                       "num_classes": denoiser.num_classes})


# ----------------------------------------------------------------------------- train_feature_net
def feature_model(paper) -> FeatureModel:
    return FeatureModel(paper.feature_model, paper.feature_resolution, _device_dtype(paper)[0],
                        paper.feature_batch_size)


def reference_stats_stage(cfg, ctx) -> None:
    """mu, sigma of the reference in the feature model's space (``reference_stats.npz``); from
    images also the FD between the two halves of the reference, the FD noise floor at that n."""
    p = cfg.paper
    model = feature_model(p)
    path = Path(p.reference).expanduser()
    metrics = {}
    if path.is_file():
        with np.load(path) as data:
            mu, sigma = data["mu"].astype(np.float64), data["sigma"].astype(np.float64)
        n = -1
    else:
        feats = reference_features(model, path, p.n_reference)
        mu, sigma = feature_stats(feats)
        n, half = len(feats), len(feats) // 2
        metrics["fd_reference_halves"] = frechet_from_stats(*feature_stats(feats[:half]),
                                                            *feature_stats(feats[half:]))
    dim = model.features(np.zeros((1, 8, 8, 3), dtype=np.uint8)).shape[1]
    if mu.shape != (dim,) or sigma.shape != (dim, dim):
        raise ValueError(f"paper.reference {p.reference}: mu {mu.shape} / sigma {sigma.shape} do "
                         f"not match the {dim}-dim features of paper.feature_model")
    _save_npz(ctx.out_dir / "reference_stats.npz", mu=mu, sigma=sigma)
    write_json_atomic(ctx.out_dir / "features.json", {"feature_model": p.feature_model,
                                                      "model_type": model.name, "dim": dim,
                                                      "resolution": p.feature_resolution})
    ctx.write_metrics({"n_reference": n, "feature_dim": dim, **metrics})


def _save_npz(path: Path, **arrays) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load_reference_stats(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(Path(folder) / "reference_stats.npz") as data:
        return data["mu"], data["sigma"]


# ----------------------------------------------------------------------------- sample_digits
def batch_generator(seed: int, n_steps: int, batch: int) -> torch.Generator:
    """The noise (and class labels) of one batch depend on (seed, steps, batch) only, never on
    the correction: every arm starts from the same particles."""
    state = np.random.SeedSequence([seed, n_steps, batch]).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


class UInt8Writer:
    """Samples of one setting written batch by batch into a memory-mapped ``.npy`` (50k LSUN
    images are ~10 GB), renamed into place when complete."""

    def __init__(self, path: Path, n: int):
        self.path, self.n, self.array, self.filled = path, n, None, 0

    def add(self, images: np.ndarray) -> None:
        if self.array is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = self.path.with_name(self.path.name + ".tmp.npy")
            self.array = np.lib.format.open_memmap(self.tmp, mode="w+", dtype=np.uint8,
                                                   shape=(self.n, *images.shape[1:]))
        self.array[self.filled:self.filled + len(images)] = images
        self.filled += len(images)

    def close(self) -> None:
        self.array.flush()
        del self.array
        os.replace(self.tmp, self.path)


def sample_images_stage(cfg, ctx) -> None:
    from components.steindiff.sample import oracle_substeps, run_trajectory, stein_arms

    s, p = cfg.sample, cfg.paper
    solver, seed = ctx.item["solver"], int(ctx.item["seed"])
    device, dtype = _device_dtype(p)
    denoiser = load_unet_denoiser(p, device, dtype)
    autoencoder = load_autoencoder(p, device, dtype)
    arms = stein_arms(s)
    seed_everything(seed)
    plan = [(n, c) for n in s.steps for c in s.corrections
            if c != "oracle" or oracle_substeps(s, DATASET, solver, n)]
    sizes = [min(p.batch_size, p.n_images - b) for b in range(0, p.n_images, p.batch_size)]
    gamma_rows, runs = [], []
    for done, (n_steps, correction) in enumerate(plan, start=1):
        sigmas = make_sigmas(s.schedule, n_steps, s.sigma_min, s.sigma_max, s.rho)
        name = f"N{n_steps}_{correction}"
        writer = UInt8Writer(ctx.out_dir / "samples" / f"{name}.npy", p.n_images)
        start, rows = time.perf_counter(), []
        for batch, size in enumerate(sizes):
            gen = batch_generator(seed, n_steps, batch)
            x = s.sigma_max * torch.randn((size, *denoiser.sample_shape), generator=gen)
            if denoiser.num_classes:
                denoiser.class_labels = torch.randint(0, denoiser.num_classes, (size,),
                                                      generator=gen).to(device)
            samples, records = run_trajectory(denoiser, x.to(device), sigmas, solver, correction,
                                              arms, seed * 100_003 + batch,
                                              oracle_substeps(s, DATASET, solver, n_steps),
                                              log_oracle=False)
            writer.add(to_uint8_images(samples, autoencoder, p.latent_scale))
            rows += [{"steps": n_steps, "correction": correction, "batch": batch, **r} for r in records]
        writer.close()
        wall = time.perf_counter() - start
        _log_step_means(ctx, name, rows)
        gamma_rows += rows
        runs.append({"dataset": DATASET, "solver": solver, "seed": seed, "steps": n_steps,
                     "nfe": nfe(solver, n_steps), "correction": correction, "wall_s": wall,
                     "file": f"samples/{name}.npy"})
        ctx.progress(done, len(plan), f"{DATASET} {solver} seed {seed}: {name} {wall:.1f}s")
    write_json_atomic(ctx.out_dir / "runs.json", runs)
    if gamma_rows:
        write_table(ctx.out_dir / "gammas.parquet",
                    {k: [r[k] for r in gamma_rows] for k in gamma_rows[0]})
    missing = [r["file"] for r in runs if not (ctx.out_dir / r["file"]).exists()]
    if missing:
        raise RuntimeError(f"{DATASET} {solver} seed {seed}: outputs vanished: {missing}")
    corrected = [r for r in gamma_rows if r["sigma_next"] > 0 and r["correction"] == "stein"]
    ctx.write_metrics({"wall_s_total": sum(r["wall_s"] for r in runs), "n_images": p.n_images,
                       "gamma_mean": _mean([r["gamma"] for r in corrected]),
                       "gamma_clipped_frac": _mean([r["clipped"] for r in corrected])})


def _log_step_means(ctx, name: str, rows: list[dict]) -> None:
    """Per step, the γ averaged over the batches (one MLflow point per step, not per batch)."""
    for step in sorted({r["step"] for r in rows}):
        at = [r for r in rows if r["step"] == step]
        ctx.log_metric(f"gamma/{name}", _mean([r["gamma"] for r in at]), step=step)
        ctx.log_metric(f"gamma_raw/{name}", _mean([r["gamma_raw"] for r in at]), step=step)


def _mean(values: list[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


# ----------------------------------------------------------------------------- evaluate
class ImageScorer:
    """FD of a uint8 sample set to the reference statistics, in the feature model's space."""

    def __init__(self, paper, reference_dir: Path):
        self.model = feature_model(paper)
        self.mu, self.sigma = load_reference_stats(reference_dir)

    def __call__(self, images: np.ndarray) -> dict:
        mu, sigma = feature_stats(self.model.features(images))
        head = np.asarray(images[:STD_IMAGES], dtype=np.float32) / 127.5 - 1   # diversity check
        return {"fd": frechet_from_stats(mu, sigma, self.mu, self.sigma),
                "sample_std": float(head.std(0).mean())}


STD_IMAGES = 2000


def load_samples(path: Path) -> np.ndarray:
    return np.load(path, mmap_mode="r")
