"""Params of the caft reproduction. Defaults are the ``small`` profile (MiniLM, CPU)."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from components.common.config import MethodConfig, Section


class Data(Section):
    n_train: int = 1000
    n_val: int = 200           # in-distribution (ambiguous) held-out sentences
    n_test: int = 400          # OOD: spurious concept anti-correlated with the label
    n_probe: int = 200         # neutral single-concept sentences for interpretation
    max_len: int = 24          # tokens; every generated sentence fits
    seed: int = 1234           # the data are fixed across training seeds


class Model(Section):
    frozen_layers: int = 3     # MiniLM layers 0..2 frozen; their output is cached once


class Train(Section):
    epochs: int = 2
    batch_size: int = 32
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup: int = 5


class Directions(Section):
    layers: list[int] = [3, 4, 5]   # residual stream after these MiniLM layers
    n_pcs: int = 10                 # top principal components of (ft - base) per layer


class Select(Section):
    """Automated interpretation rule, fixed before any test-set evaluation (see CLAIMS.md):
    keep a PC when |r_B| >= min_abs_corr_spurious and |r_A| <= max_intended_ratio * |r_B|.
    The notes' absolute rule (|r_A| <= 0.1) rejected the strongest sentiment PCs on the probe
    set, because MiniLM's sentiment axes also carry a weak animal/tool correlation."""
    min_abs_corr_spurious: float = 0.3   # |point-biserial r| with B on B-probe sentences
    max_intended_ratio: float = 0.5      # |r| with A on A-probe sentences, relative to |r_B|
    n_display: int = 10                  # max/min-projecting probe sentences saved per PC


class Caft(Section):
    # caft: interpreted PCs; random: random directions, same k per layer; top_pc: first k PCs
    # (top_pc costs 3 more fine-tunes, so small leaves it out: --set caft.variants=... adds it)
    variants: list[str] = ["caft", "random"]


class Criteria(Section):
    ood_gain_points: float = 20.0       # CAFT - standard FT, OOD intended accuracy (mean of seeds)
    id_min: float = 0.95                # CAFT ID val accuracy
    id_tolerance_points: float = 3.0    # |ID(CAFT) - ID(standard FT)|
    random_gain_fraction: float = 0.5   # random-direction gain < this x CAFT gain
    precondition_ood_max: float = 0.40  # standard FT must follow the spurious concept


class Paper(Section):
    """The paper-scale setup (Gemma-2-2B MCMC / Qwen-32B emergent misalignment) needs weights
    and data from local paths; nothing is downloaded."""
    enabled: bool = False
    model_path: str = ""
    data_root: str = ""


class CaftConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    data: Data = Data()
    model: Model = Model()
    train: Train = Train()
    directions: Directions = Directions()
    select: Select = Select()
    caft: Caft = Caft()
    criteria: Criteria = Criteria()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"n_train": 300, "n_val": 100, "n_test": 100, "n_probe": 100},
        "train": {"epochs": 1},
        "directions": {"layers": [4, 5]},
        "caft": {"variants": ["caft", "random"]},
    }
    PAPER: ClassVar[dict] = {
        "seeds": [0, 1, 2, 3, 4],
        "paper": {"enabled": True},
        "caft": {"variants": ["caft", "random", "top_pc"]},
        "directions": {"n_pcs": 20},
    }

    def preflight(self) -> None:
        if not self.paper.enabled:
            return
        for key in ("model_path", "data_root"):
            value = getattr(self.paper, key)
            if not value or not Path(value).exists():
                raise FileNotFoundError(
                    f"caft paper profile: paper.{key}={value!r} does not exist. Set it to a local "
                    f"copy (model_path: gemma-2-2b or Qwen2.5-Coder-32B-Instruct weights; data_root: "
                    f"the MCMC / insecure-code data), e.g. --set paper.{key}=/path")
        raise NotImplementedError(
            "caft paper profile: the LLM pipeline (LoRA fine-tuning, SAE directions, LLM judge) is "
            "not implemented in this CPU repo; only smoke/small run here.")
