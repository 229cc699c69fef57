"""Params of the caft reproduction. Defaults are the ``small`` profile (MiniLM, CPU)."""
from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator, model_validator

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
    # the same number per layer. Every point of the k sweep runs both. The paper profile may
    # add top: as many uninterpreted top PCs / top latents per layer (paper_directions.py).
    variants: list[str] = ["caft", "random"]
    k_percents: list[int] = [10, 50, 100]   # % of each layer's k*; 100 = the whole subspace

    @field_validator("variants")
    @classmethod
    def _both_arms(cls, value: list[str]) -> list[str]:
        if sorted(value) not in (["caft", "random"], ["caft", "random", "top"]):
            raise ValueError("caft.variants must be [caft, random] or [caft, random, top]: every k is run "
                             "with caft and random")
        return value

    @field_validator("k_percents")
    @classmethod
    def _ends_at_the_subspace(cls, value: list[int]) -> list[int]:
        if max(value) != 100 or min(value) <= 0:
            raise ValueError("caft.k_percents: percents in (0, 100], the largest 100 (k*)")
        return value


class Paper(Section):
    """The paper-scale setup: a transformers causal LM, LoRA via peft, SAE decoder directions,
    all from local paths (nothing is downloaded). ``task`` picks the paper's setting:
    ``mcmc`` (gemma-2-2b on a double multiple-choice task with a spurious cue; accuracy by
    option log-likelihood) or ``em`` (emergent misalignment: Qwen2.5-Coder-32B-Instruct on the
    insecure-code data; an LLM judge scores answers to general questions). Layouts: CLAIMS.md."""
    enabled: bool = False
    task: str = "em"                         # em, mcmc, or gender (the MC layout of mcmc)
    model_path: str = ""                     # save_pretrained folder with its tokenizer
    data_root: str = ""
    # where the ablated directions come from: sae (decoder rows of interpreted latents) or pca
    # (principal components of fine-tuned - base residuals, paper_directions.py)
    directions: str = "sae"
    sae_files: dict[int, str] = {}           # hooked decoder layer -> SAE file (sae.py)
    latents: dict[int, list[int]] = {}       # hooked decoder layer -> the interpreted latents
    pcs: dict[int, list[int]] = {}           # pca: hooked decoder layer -> the interpreted PC indices
    n_pcs: int = 20                          # pca: components computed (and displayed) per layer
    pca_data: str = ""                       # pca/top: JSON lines of {messages} chats (e.g. the model's
                                             # LMSYS answers); "" = the SFT training rows
    pca_examples: int = 256                  # pca/top: examples read (assistant/completion tokens)
    device: str = "auto"
    lora_rank: int = 32
    lora_alpha: float = 362.04               # 64 * sqrt(32): rsLoRA's scale alpha/sqrt(r) in peft's alpha/r
    lora_targets: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    grad_accum: int = 8
    optim: str = "adamw_torch"               # a transformers optimizer name; the authors' adamw_8bit needs bitsandbytes
    max_length: int = 2048
    max_train: int = 0                       # 0: every training example
    max_eval: int = 0                        # 0: every evaluation prompt (each non-train split)
    # em only: generation and the judge (an OpenAI-compatible endpoint; key from the env var)
    n_code_eval: int = 100                   # insecure-code prompts held out of training (ID check)
    samples_per_question: int = 50
    max_new_tokens: int = 600
    temperature: float = 1.0
    judge_base_url: str = ""
    judge_model: str = "gpt-4.1"
    judge_api_key_env: str = "OPENAI_API_KEY"

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        if value not in ("mcmc", "gender", "em"):
            raise ValueError("paper.task must be mcmc or gender (gemma-2-2b MC) or em (emergent misalignment)")
        return value

    @field_validator("directions")
    @classmethod
    def _known_source(cls, value: str) -> str:
        if value not in ("sae", "pca"):
            raise ValueError("paper.directions must be sae (interpreted SAE latents) or pca (interpreted PCs)")
        return value


class CaftConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    data: Data = Data()
    model: Model = Model()
    train: Train = Train()
    subspace: Subspace = Subspace()
    caft: Caft = Caft()
    paper: Paper = Paper()

    @model_validator(mode="after")
    def _top_needs_the_paper(self):
        if "top" in self.caft.variants and not self.paper.enabled:
            raise ValueError("caft.variants: top (uninterpreted PCs/latents) exists on the paper profile only")
        return self

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"n_train": 300, "n_val": 100, "n_test": 100, "n_probe": 400},
        "train": {"epochs": 1},
        "subspace": {"max_k": 8},
        "caft": {"k_percents": [50, 100]},
    }
    PAPER: ClassVar[dict] = {
        # the emergent-misalignment LoRA recipe (the authors' train_qwen.json): lr 1e-5, linear
        # decay after 5 warmup steps, 1 epoch, batch 2 x 8 accumulation, weight decay 0.01
        "seeds": [0, 1, 2],
        "train": {"epochs": 1, "batch_size": 2, "lr": 1e-5, "weight_decay": 0.01, "warmup": 5},
        "caft": {"k_percents": [100]},
        "paper": {"enabled": True},
    }

    def preflight(self) -> None:
        if self.paper.enabled:
            from components.caft.paper import preflight_paper

            preflight_paper(self)
