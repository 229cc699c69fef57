"""Params of the DomED reproduction. Defaults are the ``small`` profile.

The paper's loss form and Dirichlet parametrisation are not public; what is here is our
reconstruction (see CLAIMS.md): L = L_S + beta * L_Dir with L_S = CE(y, z) + T^2 KL(teacher mean
at T || student at T) and L_Dir the EnD^2 Dirichlet NLL with alpha = exp(logits).
"""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from components.common.config import MethodConfig, Section


class Data(Section):
    source: Literal["digits", "domainbed"] = "digits"
    # spurious_digits is the primary benchmark (built so the premise can hold; checked as P1/P2);
    # rotated_digits is the reported second one (its single-domain teachers do not transfer)
    benchmarks: list[Literal["spurious_digits", "rotated_digits"]] = ["spurious_digits", "rotated_digits"]
    n_domains: int = 6
    spurious_p: float = 0.9              # P(shortcut pixel codes the label) on source domains
    spurious_noise: float = 0.0          # std of pixel noise on the digit (harder digit, stronger shortcut)
    angles: list[float] = [0.0, 15.0, 30.0, 45.0, 60.0, 75.0]   # rotated_digits: one per domain
    image_size: int = 16                 # sklearn digits (8x8) upsampled
    holdout_fraction: float = 0.2        # DomainBed "out" split, for training-domain validation
    data_seed: int = 0                   # fixes the domain chunks and in/out split
    test_envs: list[int] = [0, 1, 2, 3, 4, 5]   # leave-one-domain-out folds (domain indices)
    # paper profile only: DomainBed dataset folder (never downloaded)
    domainbed_root: str | None = None
    domainbed_dataset: str = "PACS"


class Allocation(Section):
    scheme: Literal["single", "all", "lodo", "dual"] = "single"   # DomED: one teacher per domain


class Model(Section):
    arch: Literal["small_cnn", "resnet50"] = "small_cnn"
    width: int = 32                      # conv channels
    hidden: int = 64                     # FC units
    resnet_weights: str | None = None    # paper profile: local torchvision weights file


class Optim(Section):
    lr: float = 1e-3
    batch_size: int = 64
    teacher_steps: int = 200             # teachers get a fraction of the student budget
    steps: int = 400                     # student, ERM and every baseline: equal budget
    eval_every: int = 100                # checkpoint selection on source-domain "out" split
    # Declared here, not left to the shared loop's default. Adam is nearly invariant to a global
    # rescaling of the gradient, and the loss terms are balanced by their normalisation (see
    # losses.py), so no clipping is needed at this scale.
    grad_clip: float | None = None


class Baselines(Section):
    n_ensemble: int = 3                  # deep ensemble of ERMs; member 0 is "ERM"
    temperature_grid: tuple[float, float, int] = (0.05, 20.0, 200)   # log-spaced T for ERM+TS


class Variant(Section):
    teachers: Literal["unseen", "seen"]  # unseen: single-domain teachers, masked; seen: ERM ensemble
    distill_weight: float = 1.0          # weight of L_S
    dirichlet_weight: float = 0.0        # beta, weight of L_Dir
    label_weight: float = 0.0            # optional CE on labels (alpha in the notes)


class Student(Section):
    temperature: float = 2.0             # T of L_S and of L_Dir (EnD^2: alpha = exp(z / T), x T^2)
    dir_param: Literal["exp_logits"] = "exp_logits"
    logit_clip: float = 10.0             # alpha = exp(clip(z / T)) keeps lgamma finite
    prob_floor: float = 1e-6             # teacher probs clamped before log, then renormalised
    variants: list[str] = ["domed", "domed_beta0", "end2_only", "kd_seen"]
    # L_S = label CE + T^2 KL (Hinton KD). Revision 1 (CLAIMS.md): without the label term the
    # student only copies ~57%-accurate unseen-teacher targets and its *source-domain*
    # validation accuracy falls to 41-55% (ERM 88-91%), so that reading of L_S was dropped.
    # end2_only stays label-free, as EnD^2 is.
    specs: dict[str, Variant] = Field(default_factory=lambda: {
        "domed": Variant(teachers="unseen", dirichlet_weight=0.05, label_weight=1.0),
        "domed_beta0": Variant(teachers="unseen", dirichlet_weight=0.0, label_weight=1.0),
        "end2_only": Variant(teachers="unseen", distill_weight=0.0, dirichlet_weight=1.0),
        "kd_seen": Variant(teachers="seen", dirichlet_weight=0.0, label_weight=1.0),
    })


class Evaluation(Section):
    ece_bins: int = 15
    # premise and pass criteria of CLAIMS.md (means over test_envs x seeds)
    p1_acc_ratio: float = 0.8            # teacher acc unseen >= 0.8 x own-domain validation acc
    p2_overconf_gap: float = 0.0         # (conf - acc) unseen - (conf - acc) own-domain val <= 0
    d1_ece_ratio: float = 0.75
    d2_acc_margin: float = 1.5           # accuracy points
    d4_acc_margin: float = 0.5


class DomedConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    data: Data = Data()
    allocation: Allocation = Allocation()
    model: Model = Model()
    optim: Optim = Optim()
    baselines: Baselines = Baselines()
    student: Student = Student()
    evaluation: Evaluation = Evaluation()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"test_envs": [5]},                        # one fold per benchmark
        "optim": {"teacher_steps": 50, "steps": 100, "eval_every": 50},
        "baselines": {"n_ensemble": 2},
    }
    PAPER: ClassVar[dict] = {
        "data": {"source": "domainbed", "image_size": 224, "test_envs": [0, 1, 2, 3]},
        "model": {"arch": "resnet50"},
        "optim": {"lr": 5e-5, "batch_size": 32, "teacher_steps": 2500, "steps": 5000,
                  "eval_every": 300},
    }

    def preflight(self) -> None:
        if self.data.source != "domainbed":
            return
        root = self.data.domainbed_root
        if not root or not (Path(root) / self.data.domainbed_dataset).is_dir():
            raise FileNotFoundError(
                f"paper profile needs the DomainBed dataset folder {root!r}/{self.data.domainbed_dataset}; "
                "set data.domainbed_root (nothing is downloaded)")
        weights = self.model.resnet_weights
        if not weights or not Path(weights).is_file():
            raise FileNotFoundError(
                f"paper profile needs ImageNet ResNet-50 weights at {weights!r}; set model.resnet_weights")
