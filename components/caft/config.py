"""Params of the caft reproduction. Defaults are the ``small`` profile (MiniLM, CPU)."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import field_validator

from components.common.config import MethodConfig, Section


class Data(Section):
    n_train: int = 1000
    n_val: int = 200           # in-distribution (ambiguous) held-out sentences
    n_test: int = 400          # OOD: spurious concept anti-correlated with the label
    n_probe: int = 3000        # neutral single-concept sentences; 40 % held out
    max_len: int = 24          # tokens; every generated sentence fits
    seed: int = 1234           # the data are fixed across training seeds


class Model(Section):
    frozen_layers: int = 3     # MiniLM layers 0..2 frozen; their output is cached once


class Train(Section):
    epochs: int = 2
    batch_size: int = 32
    lr: float = 2e-4           # calibrated on the dev data seed (CLAIMS.md)
    weight_decay: float = 0.01
    warmup: int = 5


class Subspace(Section):
    """The ablated subspace, chosen on the probe set only (``subspace.py``). Values kept after
    the calibration recorded in CLAIMS.md (dev data seed, before any committed run)."""
    layers: list[int] = [2, 3, 4, 5]   # every hooked layer: the cached layer-2 output and 3, 4, 5
    probe_c: float = 1.0               # inverse L2 strength of the probe whose weights are removed
    target_acc: float = 0.55           # grow until the held-out B probe is at most this
    max_k: int = 64                    # directions per layer at most
    check_cs: list[float] = [0.1, 1.0, 10.0]  # probe strengths that judge decodability after


class Caft(Section):
    # caft: the first directions of the probe-chosen subspace; random: Gaussian directions,
    # the same number per layer. Every point of the k sweep runs both.
    variants: list[str] = ["caft", "random"]
    k_percents: list[int] = [10, 50, 100]   # % of each layer's k*; 100 = the whole subspace

    @field_validator("variants")
    @classmethod
    def _both_arms(cls, value: list[str]) -> list[str]:
        if sorted(value) != ["caft", "random"]:
            raise ValueError("caft.variants must be [caft, random]: every k is run with both")
        return value

    @field_validator("k_percents")
    @classmethod
    def _ends_at_the_subspace(cls, value: list[int]) -> list[int]:
        if max(value) != 100 or min(value) <= 0:
            raise ValueError("caft.k_percents: percents in (0, 100], the largest 100 (k*)")
        return value


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
    subspace: Subspace = Subspace()
    caft: Caft = Caft()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"n_train": 300, "n_val": 100, "n_test": 100, "n_probe": 400},
        "train": {"epochs": 1},
        "subspace": {"max_k": 8},
        "caft": {"k_percents": [50, 100]},
    }
    PAPER: ClassVar[dict] = {
        "seeds": [0, 1, 2, 3, 4],
        "paper": {"enabled": True},
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
