"""steindiff's paper profile end to end (runtime: DVC + Prefect + MLflow) on a tiny random
UNet2DModel in google/ddpm-*'s layout, a tiny DINOv2 encoder and 16 reference images; the
image grid, batches and metrics shrunk by --set. Slow (the CI run is at its time limit)."""
import math

import numpy as np
import pytest

from components.common.io import read_json, read_table
from tests.paper.harness import run_paper_shape
from tests.steindiff.paper_layouts import write_dinov2, write_flat_ddpm, write_reference_images

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]

SHRINK = [
    "paper.n_images=12", "paper.batch_size=6", "paper.feature_resolution=32", "paper.device=cpu",
    "paper.feature_batch_size=8", "sample.steps=[2,3]", "sample.n_mixture=300",
    "sample.oracle.mixture_steps=[2]", "sample.oracle.substeps=8", "data.n_reference=300",
    "verify.n_mc=20000", "verify.hutchinson_probes=2000", "verify.n_particles=3000",
    "evaluate.n_projections=32", "evaluate.mmd_max_points=100",
]
ARMS = ("none", "stein", "stein_stepwise")
PAPER_SOLVERS = ("heun", "dpmpp2m", "dpmpp3m", "unipc")   # the paper's baselines


def test_steindiff_paper_profile_on_tiny_unet_and_reference_images(tmp_path, tiny_checkpoints):
    ddpm = write_flat_ddpm(tmp_path / "ddpm", tiny_checkpoints.checkpoint("unet2d"))
    sets = SHRINK + [f"paper.checkpoint={ddpm}", f"paper.feature_model={write_dinov2(tmp_path / 'dinov2')}",
                     f"paper.reference={write_reference_images(tmp_path / 'reference')}"]
    result = run_paper_shape("steindiff", tmp_path / "project", sets)

    info = read_json(result.out("steindiff", "train_denoiser") / "pretrained.json")
    assert info["unet_class"] == "UNet2DModel" and info["sample_shape"] == [3, 16, 16]
    assert result.metrics("steindiff", "train_feature_net")["n_reference"] == 16

    sampled = result.out("steindiff", "sample_digits", "heun-0")
    runs = read_json(sampled / "runs.json")
    assert {(r["steps"], r["correction"]) for r in runs} == {(n, c) for n in (2, 3) for c in ARMS}
    images = np.load(sampled / "samples" / "N3_stein.npy")
    assert images.shape == (12, 16, 16, 3) and images.dtype == np.uint8
    gammas = read_table(sampled / "gammas.parquet").to_pandas()
    inner = gammas[(gammas.sigma_next > 0) & (gammas.correction == "stein")]
    assert set(inner.batch) == {0, 1} and (inner.gamma >= 0.5).all()     # γ per batch, lower clip

    metrics = read_table(result.out("steindiff", "evaluate") / "metrics.parquet").to_pandas()
    rows = metrics[metrics.dataset == "images"]
    assert set(zip(rows.solver, rows.steps, rows.correction)) == {
        (s, n, c) for s in PAPER_SOLVERS for n in (2, 3) for c in ARMS}
    assert rows.fd.map(math.isfinite).all() and (rows.fd >= 0).all()
    assert set(metrics.dataset) == {"mixture", "images"}      # the digits arm is replaced

    report = result.metrics("steindiff", "report")
    for arm in ("stein", "stein_stepwise"):
        assert math.isfinite(report[f"images_fd_ratio_{arm}_heun_N2"])
        for solver in PAPER_SOLVERS:
            assert 0 <= report[f"images_clip_frac_{arm}_{solver}_N3"] <= 1
    assert "C1_ratio_N3" in report                             # the mixture instrument still runs
    assert "## images: fd" in (result.out("steindiff", "report") / "report.md").read_text()
