"""Params of the steindiff reproduction. Defaults are the ``small`` profile."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from components.common.config import MethodConfig, Section


class Data(Section):
    # 2-D mixture with a closed-form denoiser: 8 modes on a circle
    n_modes: int = 8
    radius: float = 2.0
    mode_std: float = 0.15
    n_reference: int = 4000          # true samples that metrics compare against
    reference_seed: int = 12345      # distinct from the sampling seeds
    validation_seed: int = 54321     # true samples for the premise checks (not the test set)
    # sklearn digits, scaled to [-1, 1]; the test split only measures the FD floor / classifier
    digits_test_fraction: float = 0.2
    split_seed: int = 0


class Denoiser(Section):
    """EDM-preconditioned MLP denoiser for digits."""
    width: int = 256
    depth: int = 3
    emb_dim: int = 64
    steps: int = 8000
    batch_size: int = 256
    lr: float = 2e-3
    warmup: int = 200
    p_mean: float = -1.2
    p_std: float = 1.2
    sigma_data: float = 0.5
    seed: int = 0


class FeatureNet(Section):
    """Digit classifier whose penultimate layer defines FD-digits."""
    hidden: int = 128
    feature_dim: int = 32
    steps: int = 1500
    batch_size: int = 128
    lr: float = 2e-3
    noise_augment: float = 0.1   # train on slightly noisy digits so features see sample artifacts
    seed: int = 0


class Stein(Section):
    """The primary arm: the paper's formula as written (coupling variance σ_k², clipped from
    below only). γ = 1 is the vanilla solver."""
    coupling: Literal["stepwise", "marginal"] = "marginal"
    gamma_min: float = 0.5                   # calibrated on a dev seed, see CLAIMS.md
    gamma_max: float | None = None           # None: no upper clip
    n_probes: int = 5                        # Hutchinson probes per step
    probe: Literal["rademacher", "gaussian"] = "rademacher"
    divergence: Literal["hutchinson", "exact"] = "hutchinson"


class SteinAblation(Stein):
    """The earlier default, kept as a labelled ablation: stepwise coupling, two-sided clip."""
    coupling: Literal["stepwise", "marginal"] = "stepwise"
    gamma_min: float = 0.5
    gamma_max: float | None = 1.5


class Oracle(Section):
    """Best scalar rescaling: γ that moves the batch closest to the exact flow map of the same
    particles (fine-grid Heun solve). Only where the claims are judged (Heun, small N)."""
    solvers: list[str] = ["heun"]
    mixture_steps: list[int] = [3, 4, 5]
    digits_steps: list[int] = [3, 4]
    substeps: int = 64          # mixture: exact denoiser, cheap
    digits_substeps: int = 24   # digits: the trained MLP's own flow map


class Sample(Section):
    solvers: list[str] = ["euler", "heun", "dpmpp2m"]
    steps: list[int] = [3, 4, 5, 8, 18]
    # stein = primary arm; stein_stepwise = ablation; oracle only where Oracle says
    corrections: list[str] = ["none", "stein", "stein_stepwise", "oracle"]
    schedule: Literal["edm", "logsnr"] = "edm"
    sigma_min: float = 0.002
    sigma_max: float = 80.0
    rho: float = 7.0
    n_mixture: int = 4000      # one batch: γ is a batch statistic
    n_digits: int = 2000
    stein: Stein = Stein()
    stein_ablation: SteinAblation = SteinAblation()
    oracle: Oracle = Oracle()


class Evaluate(Section):
    n_projections: int = 512    # sliced Wasserstein directions
    projection_seed: int = 7
    mode_radius_stds: float = 3.0   # a sample "hits" a mode within this many component stds
    mode_min_share: float = 0.25    # a mode is covered if it gets >= this x its fair share
    mmd_max_points: int = 1000   # MMD is O(n²): a subsample keeps evaluate fast


class Verify(Section):
    n_mc: int = 200_000
    mc_seed: int = 20260802
    hutchinson_probes: int = 10_000
    n_particles: int = 20_000


class Paper(Section):
    """paper profile: a pretrained EDM denoiser saved as a torch module D(x, sigma), and
    precomputed reference feature statistics (mu, sigma) for FID."""
    enabled: bool = False
    checkpoint: str = ""
    fid_reference: str = ""


class SteindiffConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    data: Data = Data()
    denoiser: Denoiser = Denoiser()
    feature_net: FeatureNet = FeatureNet()
    sample: Sample = Sample()
    evaluate: Evaluate = Evaluate()
    verify: Verify = Verify()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"n_reference": 1000},
        "denoiser": {"steps": 200, "width": 64, "warmup": 20},
        "feature_net": {"steps": 150},
        "sample": {"solvers": ["euler", "heun"], "steps": [3, 5], "n_mixture": 1000,
                   "n_digits": 256,
                   "oracle": {"mixture_steps": [3, 5], "digits_steps": [3], "substeps": 32,
                              "digits_substeps": 8}},
        "evaluate": {"n_projections": 128, "mmd_max_points": 500},
        "verify": {"n_mc": 50_000, "hutchinson_probes": 4000, "n_particles": 5000},
    }
    PAPER: ClassVar[dict] = {
        "seeds": [0, 1, 2],
        "sample": {"n_mixture": 20_000, "n_digits": 10_000, "steps": [3, 4, 5, 6, 8, 10, 13, 18]},
        "denoiser": {"steps": 50_000},
        "paper": {"enabled": True},
    }

    def preflight(self) -> None:
        # The paper profile runs the same code path on a user-supplied pretrained model.
        if not self.paper.enabled:
            return
        for key, value in (("paper.checkpoint", self.paper.checkpoint),
                           ("paper.fid_reference", self.paper.fid_reference)):
            if not value or not Path(value).exists():
                raise FileNotFoundError(
                    f"steindiff paper profile: {key} = {value!r} does not exist; set {key} to a "
                    "local file (no downloads at run time)")
