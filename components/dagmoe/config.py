"""Params of the dagmoe reproduction. Field defaults are the ``small`` profile."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from components.common.config import MethodConfig, Section
from components.common.preflight import PreflightError, require_dir, require_tokenizer

# The paper's corpora in their published layouts (one root per dataset; globs are relative to it).
# Each entry: (config key, glob of the files, the layout told to the user when it is wrong).
PILE_TRAIN, PILE_VAL = "train/*.jsonl.zst", "val.jsonl.zst"
SHARD_LAYOUTS: dict[str, tuple[str, str]] = {
    "pile_root": (PILE_TRAIN, "The Pile's folder: train/00.jsonl.zst ... and val.jsonl.zst, JSON "
                              "lines with 'text' (EleutherAI layout, e.g. monology/pile-uncopyrighted)"),
    "wikipedia_root": ("**/*.parquet", "a wikimedia/wikipedia config folder (e.g. 20231101.en/) "
                                       "of train-*.parquet files with a 'text' column"),
    "fineweb_edu_root": ("**/*.parquet", "a HuggingFaceFW/fineweb-edu folder (e.g. sample/10BT/) "
                                         "of *.parquet files with a 'text' column"),
    "c4_root": ("**/c4-validation.*.json*", "allenai/c4's folder with en/c4-validation.*.json.gz "
                                            "(JSON lines with 'text')"),
}


class Corpus(Section):
    """Where the text comes from and how it is tokenised (stage build_corpus)."""
    source: Literal["stdlib", "files", "shards"] = "stdlib"
    # source="stdlib": docstrings of this interpreter's standard library (in-domain) and the
    # language-reference topics of pydoc_data (out-of-domain). source="files": plain-text files.
    # source="shards": the paper's corpora from the ``paper`` section (The Pile in-domain;
    # Wikipedia, FineWeb-Edu and C4 out-of-domain), read streaming, with a local tokenizer.
    train_files: list[str] = []
    val_id_files: list[str] = []
    val_ood_files: list[str] = []
    tokenizer: Literal["bpe", "bytes"] = "bpe"
    vocab_size: int = 1024          # BPE trained locally on the training split only
    val_module_fraction: float = 0.1  # whole top-level modules held out for in-domain validation
    split_salt: str = "dagmoe"      # fixed: decides which modules are held out
    min_doc_chars: int = 40         # drop one-liners like "Return self."
    max_train_chars: int = 4_000_000


class Model(Section):
    """Decoder and MoE shape, shared by every variant (stages train, evaluate, analyze)."""
    d_model: int = 96
    n_layers: int = 3
    n_heads: int = 4
    context: int = 64
    n_experts: int = 8
    d_expert: int = 192
    top_k: int = 2
    renormalize_topk: bool = False
    d_graph: int = 48               # DAG-MoE low-rank width d_g (d/2, as d_g=256 at d=512; v4)
    dag_rounds: int = 2             # L
    vector_gate: bool = False       # scalar edge gate e_ij (the note is ambiguous; logged)


class Paper(Section):
    """The paper's data (corpus.source="shards"): local roots in the published layouts
    (``SHARD_LAYOUTS``) and a tokenizer folder; nothing is downloaded."""
    pile_root: str = ""
    wikipedia_root: str = ""
    fineweb_edu_root: str = ""
    c4_root: str = ""
    tokenizer_path: str = ""        # AutoTokenizer folder (save_pretrained: tokenizer.json)
    max_train_tokens: int = 40_000_000_000   # the note's 40B-token run of the large tier
    max_eval_tokens: int = 5_000_000         # per eval set
    read_batch: int = 1_024         # documents per tokenizer call (ids are streamed to disk)


class Train(Section):
    variants: list[Literal["moe", "moe_shared", "dag_moe"]] = ["moe", "moe_shared", "dag_moe"]
    steps: int = 600                # v4: 800 -> 600 to fit the 8-minute budget (CLAIMS.md)
    batch_size: int = 16
    lr: float = 2e-3                # calibrated on dev seeds 100-107 (CLAIMS.md); was 3e-3
    warmup: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    load_balance_coef: float = 0.01
    z_loss_coef: float = 1e-3
    param_match_tolerance: float = 0.05
    common_init: bool = True        # the arms of a seed share the plain MoE's initial weights
    threads: int = 1                # torch threads per run; runs are fanned out in parallel
    device: str = "cpu"             # "auto": CUDA when visible (paper), else CPU
    precision: str = "auto"         # auto: bf16 autocast on a bf16 GPU, fp32 otherwise
    world_size: int = 1             # data-parallel processes per run; 0 = one per visible GPU
    log_every: int = 25
    curve_every: int = 100          # validation-loss curve (in-domain) every this many steps
    curve_tokens: int = 8_192       # tokens of val_id per curve point (a prefix of eval's)


class Eval(Section):
    max_tokens: int = 90_000        # per validation set (small: all 85k ID, the first 90k of 183k OOD)
    batch_size: int = 64
    throughput_batches: int = 5     # timed forward passes per variant in analyze_routing (report only)
    threads: int = 1                # small models: extra OpenMP threads only add contention
    device: str = "cpu"             # "auto": CUDA when visible (paper), else CPU


class Claims(Section):
    min_mean_rel_improvement: float = 0.005
    ood_slack_nats: float = 0.002


# Seeds already looked at: 0-2 the doubled-residual code, 3-5 v2, 6-8 v3 (premises not met),
# 100-107 dev seeds of the calibrations. Pre-registered seeds must avoid them (a test checks).
SPENT_SEEDS = frozenset(range(0, 9)) | frozenset(range(100, 108))


class DagmoeConfig(MethodConfig):
    seeds: list[int] = [9, 10, 11]  # v4, fresh (not in SPENT_SEEDS)
    corpus: Corpus = Corpus()
    model: Model = Model()
    train: Train = Train()
    eval: Eval = Eval()
    claims: Claims = Claims()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "corpus": {"vocab_size": 512, "max_train_chars": 400_000},
        "model": {"n_layers": 2},
        "train": {"steps": 100, "warmup": 10, "log_every": 10, "curve_every": 30,
                  "curve_tokens": 4_096},
        "eval": {"max_tokens": 8_000, "throughput_batches": 3},
    }
    # The paper's large tier, DAG-MoE-l: d_g=256, L=2, 699M parameters, 40B Pile tokens (the
    # note). The note gives no width, depth or expert count; the shape below is ours, chosen to
    # land near 699M parameters with a 50k-token vocabulary (CLAIMS.md gives the count).
    PAPER: ClassVar[dict] = {
        "seeds": [3],                 # one run per arm, as the paper's table reports
        "corpus": {"source": "shards"},
        "model": {"d_model": 512, "n_layers": 16, "n_heads": 8, "context": 1024,
                  "n_experts": 16, "d_expert": 2456, "top_k": 4, "d_graph": 256, "dag_rounds": 2},
        "train": {"steps": 76_300, "batch_size": 512, "lr": 3e-4, "warmup": 2000,
                  "threads": 8, "device": "auto", "world_size": 0, "log_every": 100,
                  "curve_every": 2000, "curve_tokens": 1_000_000},
        "eval": {"max_tokens": 5_000_000, "batch_size": 32, "threads": 8, "device": "auto"},
    }

    def preflight(self) -> None:
        if self.corpus.source == "files":
            self._preflight_files()
        elif self.corpus.source == "shards":
            self._preflight_shards()

    def _preflight_shards(self) -> None:
        for key, (pattern, layout) in SHARD_LAYOUTS.items():
            require_dir(f"paper.{key}", getattr(self.paper, key), layout, patterns=(pattern,))
        require_dir("paper.pile_root", self.paper.pile_root, SHARD_LAYOUTS["pile_root"][1],
                    patterns=(PILE_VAL,))
        require_tokenizer("paper.tokenizer_path", self.paper.tokenizer_path,
                          "a tokenizer folder (save_pretrained, e.g. GPT-NeoX-20B's for The Pile)")
        if self.train.world_size < 0:
            raise PreflightError("train.world_size", str(self.train.world_size),
                                 "a process count (0 = one per visible GPU)", "is negative")

    def _preflight_files(self) -> None:
        for key in ("train_files", "val_id_files", "val_ood_files"):
            paths = getattr(self.corpus, key)
            if not paths:
                raise FileNotFoundError(
                    f"dagmoe: corpus.source='files' needs corpus.{key} (a list of text files)")
            missing = [p for p in paths if "://" not in p and not Path(p).exists()]
            if missing:
                raise FileNotFoundError(f"dagmoe: corpus.{key} lists missing files: {missing}")
