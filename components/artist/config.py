"""Params of the ARTIST reproduction. Field defaults are the ``small`` profile."""
from __future__ import annotations

from typing import ClassVar, Literal

from components.common.config import MethodConfig, Section

FAMILIES = ("localize", "compare", "etiology", "count", "rhythm", "short")


class Data(Section):
    """Six task families mirroring the paper's benchmarks (see tasks.py)."""
    families: list[str] = list(FAMILIES)
    length: int = 1024               # samples per series (all families but `short`)
    short_length: int = 32           # TSQA-like short series
    n_train: int = 1000              # per family
    n_val: int = 200
    n_test: int = 300
    real_background_share: float = 0.5   # share of backgrounds cut from statsmodels datasets
    sensor_noise: float = 0.3        # white noise added to every unit-variance background
    bump_amp: float = 2.0            # candidate bumps (real and decoy), ~2 sigma: visible coarsely
    burst_amp: list[float] = [1.4, 1.8]   # localize/count burst amplitude range (fine scale only)
    seed: int = 20261                # data are fixed across training seeds (v3: fresh; v2: 20260)


class Views(Section):
    """What one view is: any window resampled (area-pooled) to `budget` points."""
    budget: int = 128                # points per view (the equal per-view budget)
    n_fine: int = 16                 # candidate windows of length/16 ...
    n_quarters: int = 4              # ... and of length/4; plus STOP
    max_zooms: int = 4               # rounds after the initial coarse full view (always shown,
                                     # as the official include_full_ts_initially=true)


class Model(Section):
    """One policy, two roles: a shared trunk with a controller head and a reasoner head."""
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    patch: int = 32                  # points per view token: 4 tokens a view
    encoder: Literal["cnn", "mlp"] = "cnn"   # patch encoder (the paper's is an MLP on padded patches)
    dropout: float = 0.0
    pointer: bool = True             # coarse-view tokens score the windows they cover (controller)
    geometry: Literal["linear", "fourier"] = "fourier"  # a view's window (start, end, width) embedded
                                     # with sin/cos features (v3; "linear" until v2.1: CLAIMS.md)


class Traces(Section):
    """Synthesised SFT traces: every candidate window (real and decoy, shuffled), with detours."""
    detour_prob: float = 0.3
    seed: int = 7


class Sft(Section):
    epochs: int = 6                  # calibrated on val (dev data seed): see CLAIMS.md
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.01
    controller_weight: float = 1.0
    answer_weight: float = 1.0
    intermediate_answer_weight: float = 0.5   # answer CE after earlier rounds too


class Rl(Section):
    """Hierarchical policy optimisation (§2 of the method notes; official reward weights)."""
    iterations: int = 150               # 200 before; cut to fit the 8-minute budget
    questions: int = 16                 # questions per iteration
    controller_rollouts: int = 4        # controller trajectories per question
    reasoner_rollouts: int = 6          # reasoner samples per trajectory (consistency)
    w_consistency: float = 3.0
    round_penalty: float = 0.1          # per zoom round
    w_format: float = 1.0
    format_error_reward: float = -2.0
    w_explore: float = 1.0
    explore_anneal_fraction: float = 0.5   # bonus decays to 0 over this share of the iterations
                                           # (the paper: 300 steps of a much longer run)
    explore_min_segments: int = 2
    explore_max_segments: int = 4
    w_accuracy: float = 3.0             # reasoner reward = 3 acc + 1 format
    kl_beta: float = 0.002              # KL to the SFT reference, reasoner objective only
    variance_temperature: float = 1.0   # variance-guided choice of the reasoner group
    variance_eps: float = 1e-3
    advantage: Literal["grpo", "rloo"] = "grpo"
    controller_temperature: float = 1.0
    reasoner_temperature: float = 0.7
    lr: float = 2e-4
    warmup: int = 10
    grad_clip: float = 1.0


class Baselines(Section):
    static_epochs: int = 6              # as many passes as SFT; best epoch chosen on val
    # static: the coarse full view at the per-view budget (the paper's comparison);
    # static_total: one full view at (1 + max_zooms) x budget points, ARTIST's largest total budget
    # (reported, never gated; dropped from the small profile for the 8-minute budget after v2, whose
    # run measured it: CLAIMS.md, History)
    static_variants: list[str] = ["static"]
    gbm_max_iter: int = 200
    gbm_learning_rate: float = 0.1


class Evaluate(Section):
    runs: int = 4                       # independent sampled runs, averaged (the paper: 8; cut
                                        # to fit the 8-minute budget)
    controller_temperature: float = 1.0
    reasoner_temperature: float = 0.7
    seed: int = 99


class Lm(Section):
    """The language-model policy (``enabled``): one causal LM plays both roles in the paper's text
    protocol (components/artist/lm.py), SFT then hierarchical RL through the shared GRPO path
    (components/common/lm_rl.grpo_train) with LoRA (peft). Off in the small profile (the tiny toy
    policy runs; CLAIMS.md has the measured reason), on in the paper profile (Qwen3-4B from
    ``paper.model_path``). Without ``paper.enabled`` it builds a tiny Qwen3 (``Qwen3Config``) and a
    word-level tokenizer here and trains it from scratch."""
    enabled: bool = False
    d_model: int = 64                   # tiny Qwen3 (no paper.model_path)
    n_layers: int = 2
    n_heads: int = 4
    max_positions: int = 1024
    value_scale: float = 2.0            # a view value z is written as round(value_scale * z) ...
    value_clip: int = 12                # ... clipped to +-value_clip
    sft_steps: int = 300
    sft_batch: int = 16
    sft_lr: float = 1e-3
    sft_lora: bool = False              # the paper's SFT is LoRA (paper.model_path only; a tiny model
                                        # built here trains in full)
    gradient_checkpointing: bool = True # in LoRA SFT of a checkpoint (the official configs)
    lora_rank: int = 8                  # the paper's LoRA: r = 8, alpha = 16, dropout 0.05
    lora_alpha: float = 16.0
    lora_dropout: float = 0.05
    lora_targets: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    rl_lora: bool = True                # RL trains a LoRA (the paper: full parameters, on 4 x H100)
    rl_lr: float = 1e-4
    rl_block: int = 5                   # GRPO steps of one role before the other role's
    micro_questions: int = 0            # questions per device batch in RL, the step accumulating
                                        # rl.questions / micro_questions of them (0: all at once)
    loss_type: str = "bnpo"             # TRL loss (the official config: bnpo)
    controller_tokens: int = 160        # new tokens of a controller plan (all its rounds)
    reasoner_tokens: int = 16           # new tokens of a reasoner answer
    eval_batch: int = 32                # prompts generated together
    val_questions: int = 0              # validation questions for the premise (0 = all)


class Paper(Section):
    """paper profile: Qwen3-4B and the six benchmarks from user paths (nothing is downloaded)."""
    enabled: bool = False
    model_path: str = ""                # a save_pretrained Qwen3 folder (weights + tokenizer)
    benchmark_root: str = ""            # holds eti/, rcw/, ecg_qa/, sleep_qa/, tsqa/, trqa/ (benchmarks.py)
    benchmarks: list[str] = ["ETI", "RCW", "ECG-QA", "Sleep-QA", "TSQA", "TRQA"]
    max_train: int = 0                  # questions per benchmark and split (0 = all)
    max_val: int = 0
    max_test: int = 0
    device: str = "auto"                # CUDA (bf16) when visible


class ArtistConfig(MethodConfig):
    seeds: list[int] = [3, 4, 5]     # v3: fresh seeds (v2, v2.1: 0, 1, 2)
    data: Data = Data()
    views: Views = Views()
    model: Model = Model()
    traces: Traces = Traces()
    sft: Sft = Sft()
    rl: Rl = Rl()
    baselines: Baselines = Baselines()
    evaluate: Evaluate = Evaluate()
    lm: Lm = Lm()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"families": ["localize", "rhythm"], "length": 512, "n_train": 200, "n_val": 50,
                 "n_test": 50},
        "sft": {"epochs": 1},
        "rl": {"iterations": 20, "questions": 8},
        "model": {"n_layers": 1},
        "baselines": {"static_epochs": 1, "gbm_max_iter": 20, "static_variants": ["static"]},
        "evaluate": {"runs": 2},
    }
    PAPER: ClassVar[dict] = {
        # the official RL configs (configs/rl_*.yaml): N = 6 reasoner rollouts, up to 5 rounds,
        # controller T 1.0 / reasoner T 0.7, lr 1e-6, KL 0.002 (reasoner only), bnpo; 8 eval runs
        "paper": {"enabled": True},
        "lm": {"enabled": True, "sft_lora": True, "sft_steps": 2000, "sft_batch": 8, "sft_lr": 1e-4,
               "rl_lr": 1e-6, "rl_block": 10, "micro_questions": 1, "controller_tokens": 1024,
               "reasoner_tokens": 512, "eval_batch": 16},
        "views": {"budget": 128, "max_zooms": 5},
        "rl": {"iterations": 400, "questions": 16, "controller_rollouts": 4, "reasoner_rollouts": 6,
               "explore_anneal_fraction": 0.75},
        "baselines": {"static_variants": ["static"]},
        "evaluate": {"runs": 8},
    }

    def preflight(self) -> None:
        if not self.paper.enabled:
            return
        from components.artist.benchmarks import BENCHMARKS, LAYOUT, check_root
        from components.common.preflight import PreflightError, require_checkpoint, require_dir, require_tokenizer

        if not self.lm.enabled:
            raise ValueError("artist: paper.enabled needs lm.enabled = true (the paper profile never runs the "
                             "tiny toy policy)")
        layout = "a save_pretrained Qwen3 folder (config.json, model.safetensors, tokenizer.json)"
        require_checkpoint("paper.model_path", self.paper.model_path, layout)
        require_tokenizer("paper.model_path", self.paper.model_path, layout)
        unknown = [b for b in self.paper.benchmarks if b not in BENCHMARKS]
        if unknown or not self.paper.benchmarks:
            raise ValueError(f"artist: paper.benchmarks = {self.paper.benchmarks!r} must name some of "
                             f"{', '.join(BENCHMARKS)}")
        require_dir("paper.benchmark_root", self.paper.benchmark_root, LAYOUT)
        problem = check_root(self.paper.benchmark_root, list(self.paper.benchmarks))
        if problem:
            raise PreflightError("paper.benchmark_root", self.paper.benchmark_root, LAYOUT, problem)
