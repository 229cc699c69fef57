"""Params of the ioadam reproduction. Field defaults are the ``small`` profile."""
from __future__ import annotations

from typing import Any, ClassVar

from pydantic import model_validator

from components.common.config import MethodConfig, Section
from components.common.preflight import require_dir, require_file, require_tokenizer

C4_LAYOUT = ("a C4 folder (e.g. allenai/c4's en/): JSON-lines shards c4-train.*.json[.gz] and "
             "c4-validation.*.json[.gz], one document per line with a 'text' field")
C4_TRAIN, C4_VALIDATION = "**/c4-train.*.json*", "**/c4-validation.*.json*"


class Device(Section):
    device: str = "cpu"           # "auto" (paper profile): CUDA when visible, else CPU
    threads: int = 1              # torch intra-op threads per stage instance (fan-outs run side by side)


class Digits(Section):
    """sklearn digits, MLP 64-256-256-10."""
    sizes: list[int] = [64, 256, 256, 10]
    val_frac: float = 0.2
    test_frac: float = 0.2
    split_seed: int = 0
    batch_size: int = 128
    epochs: int = 40              # v1: 60; digits is reported only in v2, its budget went to the LM seeds
    optimizers: list[str] = ["adam", "ioadam_b1", "ioadam_b4", "adafactor", "sgd", "sgdm"]
    lr_grid: list[float] = [3e-3, 1e-2, 3e-2, 1e-1, 3e-1]   # same start for all, widened until interior


# GaLore's LLaMA pre-training sizes (hidden, layers, heads, FFN); `--set charlm.size=350m` picks one.
LLAMA_SIZES: dict[str, dict[str, int]] = {
    "60m": {"d_model": 512, "n_layers": 8, "n_heads": 8, "d_ff": 1376},
    "130m": {"d_model": 768, "n_layers": 12, "n_heads": 12, "d_ff": 2048},
    "350m": {"d_model": 1024, "n_layers": 24, "n_heads": 16, "d_ff": 2736},
    "1b": {"d_model": 2048, "n_layers": 24, "n_heads": 32, "d_ff": 5461},
}


class CharLM(Section):
    """Causal LM pre-training. Small: a byte-level transformer on standard-library docstrings.
    Paper: LLaMA built from ``LlamaConfig`` on C4 shards, tokenised by a local tokenizer."""
    source: str = "stdlib"        # stdlib (docstrings) | text (a UTF-8 file) | c4 (JSON-lines shards)
    corpus_path: str = ""         # text: the file; c4: the folder of shards (see C4_LAYOUT)
    tokenizer_path: str = ""      # c4: a tokenizer folder (save_pretrained); empty = bytes
    arch: str = "bytes"           # bytes: the byte transformer of tasks.py | llama: LlamaForCausalLM
    d_ff: int = 0                 # llama intermediate size (0: 4 x d_model)
    size: str = ""                # llama preset (LLAMA_SIZES): fills d_model/n_layers/n_heads/d_ff not set explicitly
    max_bytes: int = 600_000      # training bytes taken from the stdlib (sorted files)
    max_train_tokens: int = 2_000_000   # c4: tokens read from the train shards (in file order)
    max_eval_tokens: int = 200_000      # c4: tokens for each of val and test (validation shards)
    val_frac: float = 0.1         # whole modules held out for lr selection
    test_frac: float = 0.1        # whole modules held out for the reported loss
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    seq_len: int = 64
    batch_size: int = 16          # IO-Adam's token count per step = batch_size * seq_len
    steps: int = 400
    sweep_steps: int = 200
    warmup: int = 20
    eval_windows: int = 400
    optimizers: list[str] = ["adam", "ioadam_b4", "sgdm"]   # sgdm: the premise's baseline (Adam must matter)
    # starting grid, the same for all; widened per optimizer until its best lr is interior (sweep.max_widen)
    lr_grid: list[float] = [3e-3, 1e-2, 3e-2, 1e-1, 3e-1]
    seeds: list[int] = [0, 1, 2]

    @model_validator(mode="before")
    @classmethod
    def _apply_size_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("size"):
            if data["size"] not in LLAMA_SIZES:
                raise ValueError(f"charlm.size must be one of {', '.join(LLAMA_SIZES)} (got {data['size']!r})")
            data = {**LLAMA_SIZES[data["size"]], **data}
        return data


class Sweep(Section):
    seeds: list[int] = [100, 101]  # lr selection seeds (mean over them per lr): not evaluation seeds
    max_widen: int = 3             # extra lrs added past an edge of the grid while the best lr sits on it


class Memory(Section):
    """Optimizers whose memory is profiled; ``_ref`` = IO-Adam reference mode (keeps W.grad)."""
    optimizers: list[str] = ["adam", "ioadam_b1", "ioadam_b4", "ioadam_b4_ref", "ioadam_b8",
                             "adafactor", "sgdm"]
    timed_steps: int = 20         # round-robin repeats per optimizer for the side-by-side step-time ratio


class Criteria(Section):
    """Pass thresholds of CLAIMS.md (v2 pre-registration)."""
    state_saving_min: float = 0.45
    premise_gap_sd_min: float = 2.0     # Adam's val-loss lead over SGD-m, in pooled seed std
    gain_share_min: float = 0.5         # IO-Adam keeps >= this share of Adam's test-loss gain over SGD-m
    lm_loss_ratio_max: float = 1.03
    acc_gap_max_points: float = 1.0     # digits: reported only
    sgd_margin_points: float = 2.0      # digits: reported only


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
                   "sweep_steps": 5, "warmup": 2, "eval_windows": 20, "lr_grid": [3e-3, 3e-2], "seeds": [0]},
        "sweep": {"seeds": [100], "max_widen": 0},
        "memory": {"optimizers": ["adam", "ioadam_b4", "ioadam_b4_ref"], "timed_steps": 2},
    }
    PAPER: ClassVar[dict] = {
        # GaLore's LLaMA-60M pre-training setting (seq 256, batch 512, 10k steps, 10 % warmup) on
        # C4; other sizes by --set (CLAIMS.md lists 130M/350M/1B). ~1.3B train tokens = 10k x 512 x 256.
        "device": {"device": "auto"},
        "charlm": {"source": "c4", "arch": "llama", "size": "60m",
                   "seq_len": 256, "batch_size": 512, "steps": 10_000, "sweep_steps": 1_000, "warmup": 1_000,
                   "max_train_tokens": 1_400_000_000, "max_eval_tokens": 1_100_000, "eval_windows": 4_000,
                   "optimizers": ["adam", "ioadam_b4", "ioadam_b8", "adafactor"],
                   "lr_grid": [3e-4, 1e-3, 3e-3, 1e-2], "seeds": [0]},
        # one sweep seed per lr at this scale (each point is ~1k GPU steps); widening still applies
        "sweep": {"seeds": [100], "max_widen": 2},
    }

    def preflight(self) -> None:
        c = self.charlm
        if c.source not in ("stdlib", "text", "c4") or c.arch not in ("bytes", "llama"):
            raise ValueError(f"charlm.source must be stdlib|text|c4 and charlm.arch bytes|llama "
                             f"(got {c.source!r}, {c.arch!r})")
        if c.source == "stdlib" and c.corpus_path:
            raise ValueError("charlm.corpus_path is set but charlm.source is stdlib: set charlm.source "
                             "to text (a UTF-8 file) or c4 (JSON-lines shards)")
        if c.arch == "bytes" and c.tokenizer_path:
            raise ValueError("charlm.tokenizer_path needs charlm.arch = llama (the byte model has 256 ids)")
        if c.source == "text":
            require_file("charlm.corpus_path", c.corpus_path, "a UTF-8 text file")
        if c.source == "c4":
            require_dir("charlm.corpus_path", c.corpus_path, C4_LAYOUT, patterns=(C4_TRAIN, C4_VALIDATION))
            require_tokenizer("charlm.tokenizer_path", c.tokenizer_path,
                              "a tokenizer folder (save_pretrained of e.g. t5-base, as GaLore uses: tokenizer.json)")
