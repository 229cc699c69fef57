"""Params of the ioadam reproduction. Field defaults are the ``small`` profile."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from components.common.config import MethodConfig, Section


class Device(Section):
    device: str = "cpu"           # "cuda" for the paper profile
    threads: int = 1              # torch intra-op threads per stage instance (fan-outs run side by side)


class Digits(Section):
    """sklearn digits, MLP 64-256-256-10."""
    sizes: list[int] = [64, 256, 256, 10]
    val_frac: float = 0.2
    test_frac: float = 0.2
    split_seed: int = 0
    batch_size: int = 128
    epochs: int = 60
    optimizers: list[str] = ["adam", "ioadam_b1", "ioadam_b4", "adafactor", "sgd", "sgdm"]
    lr_grid: list[float] = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]   # same grid for all; 1.0 so plain SGD is not cut off


class CharLM(Section):
    """Byte-level causal transformer on standard-library docstrings (or a user corpus)."""
    corpus_path: str = ""         # empty: docstrings parsed from this interpreter's stdlib
    max_bytes: int = 600_000      # training bytes taken from the stdlib (sorted files)
    val_frac: float = 0.1         # whole modules held out for lr selection
    test_frac: float = 0.1        # whole modules held out for the reported loss
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    seq_len: int = 64
    batch_size: int = 16          # IO-Adam's token count per step = batch_size * seq_len
    steps: int = 400
    sweep_steps: int = 150
    warmup: int = 20
    eval_windows: int = 400
    optimizers: list[str] = ["adam", "ioadam_b4"]
    lr_grid: list[float] = [3e-3, 1e-2, 3e-2, 1e-1]   # IO-Adam's V exceeds g^2 over many tokens: its best lr is larger
    seeds: list[int] = [0]


class Sweep(Section):
    seed: int = 100               # lr selection seed: not one of the evaluation seeds


class Memory(Section):
    """Optimizers whose memory is profiled; ``_ref`` = IO-Adam reference mode (keeps W.grad)."""
    optimizers: list[str] = ["adam", "ioadam_b1", "ioadam_b4", "ioadam_b4_ref", "ioadam_b8",
                             "adafactor", "sgdm"]
    timed_steps: int = 10         # steps per optimizer for the side-by-side step-time ratio


class Criteria(Section):
    """Pass thresholds of CLAIMS.md (fixed before the first small run)."""
    state_saving_min: float = 0.45
    acc_gap_max_points: float = 1.0
    sgd_margin_points: float = 2.0
    lm_loss_ratio_max: float = 1.03


class IOAdamConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    device: Device = Device()
    digits: Digits = Digits()
    charlm: CharLM = CharLM()
    sweep: Sweep = Sweep()
    memory: Memory = Memory()
    criteria: Criteria = Criteria()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "digits": {"epochs": 5, "optimizers": ["adam", "ioadam_b4"], "lr_grid": [3e-3, 3e-2]},
        "charlm": {"max_bytes": 60_000, "d_model": 32, "n_heads": 2, "n_layers": 1, "steps": 20,
                   "sweep_steps": 5, "warmup": 2, "eval_windows": 20, "lr_grid": [3e-3]},
        "memory": {"optimizers": ["adam", "ioadam_b4", "ioadam_b4_ref"], "timed_steps": 2},
    }
    PAPER: ClassVar[dict] = {
        # GPT-2-small-sized LM pre-training on a user corpus (a UTF-8 text file), on one GPU.
        "device": {"device": "cuda"},
        "charlm": {"d_model": 768, "n_heads": 12, "n_layers": 12, "seq_len": 1024,
                   "batch_size": 32, "steps": 20_000, "sweep_steps": 2_000, "warmup": 1_000,
                   "eval_windows": 2_000, "optimizers": ["adam", "ioadam_b4", "ioadam_b8", "adafactor"],
                   "lr_grid": [3e-4, 1e-3, 3e-3, 1e-2], "seeds": [0, 1]},
    }

    def preflight(self) -> None:
        path = self.charlm.corpus_path
        if self.device.device.startswith("cuda") and not path:
            raise FileNotFoundError(
                "the paper profile needs a text corpus: set charlm.corpus_path to a UTF-8 text file")
        if path and not Path(path).expanduser().is_file():
            raise FileNotFoundError(f"charlm.corpus_path={path!r} does not exist (set charlm.corpus_path)")
