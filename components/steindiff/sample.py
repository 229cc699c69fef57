"""sample_mixture / sample_digits: the solver × steps × correction grid for one (solver, seed).

Steps and corrections loop inside one stage instance so that vanilla and corrected runs start
from the very same noise (a paired comparison) and the tiny mixture runs do not each pay the
runtime's per-instance overhead.
"""
from __future__ import annotations

import math
import time

import torch

from components.common.diffusion import make_sigmas
from components.common.io import write_json_atomic, write_table
from components.common.seeds import seed_everything
from components.steindiff.data import load_mixture, save_npy
from components.steindiff.solvers import nfe, solve
from components.steindiff.stein import SteinSettings, sample_oracle, sample_steindiff
from components.steindiff.train import load_denoiser
from components.steindiff.threads import torch_threads


def initial_noise(shape: tuple[int, ...], sigma_max: float, seed: int, n_steps: int,
                  dtype: torch.dtype) -> torch.Tensor:
    """x at σ_max; depends on (seed, n_steps) only, never on the correction."""
    gen = torch.Generator().manual_seed(seed * 1009 + n_steps)
    return sigma_max * torch.randn(shape, generator=gen, dtype=dtype)


def stein_arms(sample) -> dict[str, SteinSettings]:
    """The two Stein arms: the paper's formula (primary) and the stepwise/two-sided ablation."""
    return {"stein": SteinSettings.from_section(sample.stein),
            "stein_stepwise": SteinSettings.from_section(sample.stein_ablation)}


def oracle_substeps(sample, dataset: str, solver: str, n_steps: int) -> int:
    """Fine-grid substeps of the oracle for this trajectory, 0 where no oracle is run."""
    o = sample.oracle
    steps = o.mixture_steps if dataset == "mixture" else o.digits_steps
    if solver not in o.solvers or n_steps not in steps:
        return 0
    return o.substeps if dataset == "mixture" else o.digits_substeps


def run_trajectory(denoise, x, sigmas, solver: str, correction: str, arms: dict, seed: int,
                   substeps: int, log_oracle: bool):
    if correction == "none":
        return solve(denoise, x, sigmas, solver), []
    if correction in arms:
        return sample_steindiff(denoise, x, sigmas, solver, arms[correction], probe_seed=seed,
                                oracle_substeps=substeps if log_oracle else 0)
    if correction == "oracle":
        return sample_oracle(denoise, x, sigmas, solver, substeps)
    raise ValueError(f"unknown correction {correction!r} (none, oracle, {', '.join(arms)})")


def run_grid(denoise, shape, dtype, cfg, ctx, dataset: str) -> None:
    """All (steps, correction) trajectories of one (solver, seed); writes samples and γ stats.
    On the mixture the Stein arms also log the oracle γ of their own particles."""
    s, solver, seed = cfg.sample, ctx.item["solver"], int(ctx.item["seed"])
    arms = stein_arms(s)
    seed_everything(seed)
    plan = [(n, c) for n in s.steps for c in s.corrections
            if c != "oracle" or oracle_substeps(s, dataset, solver, n)]
    gamma_rows, runs, samples_by_name = [], [], {}
    for done, (n_steps, correction) in enumerate(plan, start=1):
        sigmas = make_sigmas(s.schedule, n_steps, s.sigma_min, s.sigma_max, s.rho)
        x_init = initial_noise(shape, s.sigma_max, seed, n_steps, dtype)
        start = time.perf_counter()
        samples, records = run_trajectory(denoise, x_init, sigmas, solver, correction, arms, seed,
                                          oracle_substeps(s, dataset, solver, n_steps),
                                          log_oracle=dataset == "mixture")
        wall = time.perf_counter() - start
        name = f"N{n_steps}_{correction}"
        samples_by_name[name] = samples.numpy()
        for rec in records:
            gamma_rows.append({"steps": n_steps, "correction": correction, **rec})
            ctx.log_metric(f"gamma/{name}", rec["gamma"], step=rec["step"])
            ctx.log_metric(f"gamma_raw/{name}", rec["gamma_raw"], step=rec["step"])
            if correction in arms and math.isfinite(rec["gamma_oracle"]):
                ctx.log_metric(f"gamma_over_oracle/{name}",
                               rec["gamma_raw"] / rec["gamma_oracle"], step=rec["step"])
        runs.append({"dataset": dataset, "solver": solver, "seed": seed, "steps": n_steps,
                     "nfe": nfe(solver, n_steps), "correction": correction, "wall_s": wall,
                     "file": f"samples/{name}.npy"})
        ctx.progress(done, len(plan), f"{dataset} {solver} seed {seed}: {name} {wall:.1f}s")
    # everything is written at the end, then checked: a sibling stage instance starting while
    # this one runs may clean temp folders (seen with the runtime's stale-temp cleanup); a
    # stage that lost files must fail rather than be recorded as finished
    for name, array in samples_by_name.items():
        save_npy(ctx.out_dir / "samples" / f"{name}.npy", array)
    write_json_atomic(ctx.out_dir / "runs.json", runs)
    if gamma_rows:
        write_table(ctx.out_dir / "gammas.parquet", _columns(gamma_rows))
    missing = [r["file"] for r in runs if not (ctx.out_dir / r["file"]).exists()]
    if missing:
        raise RuntimeError(f"{dataset} {solver} seed {seed}: outputs vanished before the stage "
                           f"returned: {missing}")
    corrected = [r for r in gamma_rows if r["sigma_next"] > 0 and r["correction"] == "stein"]
    ctx.write_metrics({
        "wall_s_total": sum(r["wall_s"] for r in runs),
        "gamma_mean": _mean([r["gamma"] for r in corrected]),
        "gamma_clipped_frac": _mean([r["clipped"] for r in corrected]),
    })


def _columns(rows: list[dict]) -> dict[str, list]:
    return {k: [r[k] for r in rows] for k in rows[0]}


def _mean(values: list[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def sample_mixture_stage(cfg, ctx) -> None:
    with torch_threads(1):
        _sample_mixture_stage(cfg, ctx)


def _sample_mixture_stage(cfg, ctx) -> None:
    mixture = load_mixture(ctx.inputs["prepare_data"])
    dim = mixture.means.shape[1]
    run_grid(mixture.denoiser(torch.float64), (cfg.sample.n_mixture, dim), torch.float64, cfg, ctx,
             "mixture")


def sample_digits_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:       # paper profile: the pretrained image UNet, same grid
        from components.steindiff.images import sample_images_stage

        return sample_images_stage(cfg, ctx)
    with torch_threads(1):
        _sample_digits_stage(cfg, ctx)


def _sample_digits_stage(cfg, ctx) -> None:
    model = load_denoiser(ctx.inputs["train_denoiser"])
    for p in model.parameters():   # only the input needs gradients (divergence)
        p.requires_grad_(False)
    dim = model.net.inp.in_features
    run_grid(model, (cfg.sample.n_digits, dim), torch.float32, cfg, ctx, "digits")
