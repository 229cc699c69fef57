"""evaluate: one metrics row per sampled trajectory, plus reference rows (true samples)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from components.common.io import read_json, read_table, write_table
from components.steindiff.data import load_mixture, load_npy
from components.steindiff.mixture import Mixture
from components.steindiff.quality import RBFMMD, frechet_distance, mode_stats, sliced_wasserstein
from components.steindiff.train import load_classifier
from components.steindiff.threads import torch_threads


def mixture_metrics(x: np.ndarray, reference: np.ndarray, validation: np.ndarray,
                    mixture: Mixture, mmd: RBFMMD, ev) -> dict:
    x = np.where(np.isfinite(x), x, 1e6)   # a blown-up trajectory scores badly, not NaN
    return {"sw2": sliced_wasserstein(x, reference, ev.n_projections, ev.projection_seed),
            "sw2_val": sliced_wasserstein(x, validation, ev.n_projections, ev.projection_seed),
            "mmd": mmd(x[:ev.mmd_max_points]),
            "log_density": float(np.mean(mixture.log_density(x))),
            **mode_stats(x, mixture, ev.mode_radius_stds, ev.mode_min_share)}


class DigitFeatures:
    """FD-digits against the training digits, in the feature net's penultimate layer."""

    def __init__(self, model_dir: Path, reference: np.ndarray, mmd_max_points: int):
        self.model = load_classifier(model_dir)
        self.reference = reference
        self.ref_feats = self.features(reference)
        self.mmd = RBFMMD(reference[:mmd_max_points])

    @torch.no_grad()
    def features(self, x: np.ndarray) -> np.ndarray:
        return self.model.features(torch.as_tensor(x, dtype=torch.float32)).numpy().astype(np.float64)

    @torch.no_grad()
    def metrics(self, x: np.ndarray, ev) -> dict:
        # images are clipped to the valid pixel range, as any image pipeline would
        x = np.clip(np.nan_to_num(x, nan=0.0), -1.0, 1.0)
        probs = torch.softmax(self.model(torch.as_tensor(x, dtype=torch.float32)), 1).numpy()
        share = np.bincount(probs.argmax(1), minlength=10) / len(x)
        return {"fd": frechet_distance(self.features(x), self.ref_feats),
                "sw2": sliced_wasserstein(x, self.reference, ev.n_projections, ev.projection_seed),
                "mmd": self.mmd(x[:ev.mmd_max_points]),
                "class_entropy": float(-(share[share > 0] * np.log(share[share > 0])).sum()),
                "confidence": float(probs.max(1).mean()),
                "sample_std": float(x.std(0).mean())}


def _sample_rows(instances: dict[str, Path], score, load=load_npy) -> list[dict]:
    rows = []
    for inst_dir in instances.values():
        gammas = _gamma_summary(_gamma_table(Path(inst_dir)))
        for run in read_json(Path(inst_dir) / "runs.json"):
            x = load(Path(inst_dir) / run["file"])
            key = (run["steps"], run["correction"])
            rows.append({**{k: v for k, v in run.items() if k != "file"}, **score(x),
                         **gammas.get(key, {"gamma_mean": NAN, "clip_frac": NAN})})
    return rows


NAN = float("nan")


def _gamma_table(inst_dir: Path) -> pd.DataFrame:
    path = inst_dir / "gammas.parquet"
    return read_table(path).to_pandas() if path.exists() else pd.DataFrame()


def _gamma_summary(df: pd.DataFrame) -> dict:
    """Per (steps, correction): mean γ and the fraction of corrected steps that were clipped."""
    if df.empty:
        return {}
    inner = df[df["sigma_next"] > 0].groupby(["steps", "correction"])
    return {(int(n), c): {"gamma_mean": float(g["gamma"].mean()),
                          "clip_frac": float(g["clipped"].mean())} for (n, c), g in inner}


def gamma_log(instances: dict[str, Path], dataset: str) -> pd.DataFrame:
    """Every step record of every instance, with its dataset, solver and seed."""
    frames = []
    for inst_dir in instances.values():
        df = _gamma_table(Path(inst_dir))
        runs = read_json(Path(inst_dir) / "runs.json")
        if df.empty or not runs:
            continue
        frames.append(df.assign(dataset=dataset, solver=runs[0]["solver"], seed=runs[0]["seed"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _reference_row(dataset: str, metrics: dict) -> dict:
    return {"dataset": dataset, "solver": "true_samples", "seed": -1, "steps": 0, "nfe": 0,
            "correction": "none", "wall_s": 0.0, **metrics, "gamma_mean": NAN, "clip_frac": NAN}


def _digits_rows(ctx, data: Path, ev) -> list[dict]:
    digits = DigitFeatures(ctx.inputs["train_feature_net"], load_npy(data / "digits_train_x.npy"),
                           ev.mmd_max_points)
    rows = _sample_rows(ctx.inputs["sample_digits"], lambda x: digits.metrics(x, ev))
    # floor: held-out real digits vs the training digits (fewer points, so a slight overestimate)
    rows.append(_reference_row("digits", digits.metrics(load_npy(data / "digits_test_x.npy"), ev)))
    return rows


def evaluate_stage(cfg, ctx) -> None:
    with torch_threads(1):
        _evaluate_stage(cfg, ctx)


def _evaluate_stage(cfg, ctx) -> None:
    ev, data = cfg.evaluate, ctx.inputs["prepare_data"]
    mixture = load_mixture(data)
    reference = load_npy(data / "mixture_reference.npy")
    validation = load_npy(data / "mixture_validation.npy")
    mmd = RBFMMD(reference[:ev.mmd_max_points])
    rows = _sample_rows(ctx.inputs["sample_mixture"],
                        lambda x: mixture_metrics(x, reference, validation, mixture, mmd, ev))
    fresh = mixture.sample(len(reference), np.random.default_rng(ev.projection_seed + 1))
    rows.append(_reference_row("mixture", mixture_metrics(fresh, reference, validation, mixture,
                                                          mmd, ev)))

    if cfg.paper.enabled:       # paper profile: FD of the image samples to the reference
        from components.steindiff.images import DATASET, ImageScorer, load_samples

        scorer = ImageScorer(cfg.paper, ctx.inputs["train_feature_net"])
        rows += _sample_rows(ctx.inputs["sample_digits"], scorer, load_samples)
        image_dataset = DATASET
    else:
        rows += _digits_rows(ctx, data, ev)
        image_dataset = "digits"

    columns = sorted({k for r in rows for k in r})
    table = {k: [r.get(k, float("nan")) for r in rows] for k in columns}
    write_table(ctx.out_dir / "metrics.parquet", table)
    steps = pd.concat([gamma_log(ctx.inputs["sample_mixture"], "mixture"),
                       gamma_log(ctx.inputs["sample_digits"], image_dataset)], ignore_index=True)
    write_table(ctx.out_dir / "gammas.parquet", steps)
    ctx.write_metrics({"n_rows": len(rows)})
