"""Params of the orbit reproduction. Defaults are the ``small`` profile.

Hyper-parameters the official repo fixes (configs/training.json, curriculum_admission) are
kept where they transfer to a tiny policy: group size 8, clip 0.2 / 0.28, token-mean loss,
dynamic sampling, temperature 1.0, EMA alpha 0.1, mastery 0.9, window 6, admission gate 0.75.
Scaled down: lr (1e-6 is for a 4B model; a tiny from-scratch Qwen3 needs ~1e-3), response
length (10 statement tokens) and the overlong buffer. stochastic_review keeps the repo defaults
(window 5, review ratio 0.5, min weight 0.2, power 1). Our own choices (not in the paper):
the difficulty-filter thresholds, the synthetic world, the template generator.
"""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from components.common.config import MethodConfig, Section

# Qwen3-Embedding's default retrieval task (its model card), which the official ORBIT code uses
QWEN3_TASK = "Given a web search query, retrieve relevant passages that answer the query"


class Cases(Section):
    source: Literal["synthetic", "healthbench_jsonl"] = "synthetic"
    n_train: int = 400
    n_test: int = 200
    n_seed_pool: int = 300          # the retrieval pool (HealthBench non-Hard analogue), disjoint
    n_val: int = 100                # validation cases (reference rubrics): premise checks only
    seed: int = 20260301
    p_red_flag: float = 0.35
    p_missing_duration: float = 0.5
    p_pregnant: float = 0.35        # among adult women
    p_clinician: float = 0.25
    p_low_resource: float = 0.25
    p_truncate_first: float = 0.25  # truncate after the first patient turn instead of the second


class Endpoint(Section):
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8            # judge calls in flight at once (paper scale: thousands per step)


class Rubrics(Section):
    """Retrieval as the official code's rubrics_generator/rag.py: the ``k_cases`` pool cases
    nearest the query; the ``top_k`` nearest are shown whole, and their items are ranked against
    the query (embedding similarity, then the reranker if one is set) into ``n_candidates``
    candidate criteria for the LLM generators (the template generator reads the ``top_k`` rubrics)."""
    generator: Literal["template", "lm", "openai"] = "template"
    top_k: int = 3                  # seed rubrics shown to the generator (repo: k_examples 3)
    k_cases: int = 10               # pool cases whose items feed the candidate list (repo: k_cases 10)
    k_rerank: int = 50              # items kept by embedding similarity before reranking (repo: k_rubrics 50)
    n_candidates: int = 15          # candidate criteria shown to the generator (repo: k_rerank 15)
    vote_share: float = 0.5         # template generator: keep a transferred item at this weighted vote
    max_items: int = 20
    # the retrieval embedder: "" = all-MiniLM-L6-v2 (small profile), else a local transformers folder
    # (paper: Qwen3-Embedding, last-token pooling, the instruction on queries)
    embedder: str = ""
    embed_pooling: Literal["last", "mean", "cls"] = "last"
    embed_instruction: str = QWEN3_TASK
    embed_instruct_documents: bool = False   # the official code prefixes pool texts too
    embed_max_tokens: int = 64
    reranker: str = ""              # optional: a local yes/no reranker folder (Qwen3-Reranker)
    device: str = "auto"            # embedder / reranker device (CUDA when visible)
    lm_path: str = ""               # generator "lm": a local transformers model folder
    endpoint: Endpoint = Endpoint()


class PolicySection(Section):
    """A tiny Qwen3ForCausalLM (d_model = hidden size) with a word-level tokenizer."""
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_response: int = 10          # new tokens per reply (one statement each)
    sft_steps: int = 300
    sft_batch: int = 64
    sft_lr: float = 3e-3
    reply_min: int = 3
    reply_max: int = 6
    p_filler: float = 0.35          # mediocre replies: filler / generic advice / anything
    p_generic: float = 0.45
    seed: int = 0


class Filter(Section):
    rollouts: int = 8
    temperature: float = 1.0
    easy_threshold: float = 0.8     # our choice: drop cases the base already solves (mean score)
    seed: int = 17


class GRPO(Section):
    variants: list[str] = ["orbit_review", "orbit_admission", "orbit_all", "generic"]
    steps: int = 250
    prompts_per_step: int = 8
    group_size: int = 8
    lr: float = 1e-3
    clip_low: float = 0.2
    clip_high: float = 0.28
    temperature: float = 1.0
    top_p: float = 0.95             # repo rollout setting
    overlong_buffer: int = 3
    overlong_factor: float = 1.0
    # signed_fallback: a curriculum window holding only negative items still gives a signal
    reward_policy: Literal["positive", "signed_fallback"] = "signed_fallback"
    window: int = 6
    alpha: float = 0.1
    mastery: float = 0.9
    gate: float = 0.75
    review_window: int = 5          # stochastic_review (repo defaults)
    review_ratio: float = 0.5
    min_weight: float = 0.2
    weight_power: float = 1.0
    # memory (lm_rl.grpo_train): rollouts per forward/backward (0 = the whole step; gradients are
    # accumulated over the step's micro-batches), rollouts per generation call (0 = the whole
    # step), activation checkpointing, and the dtype of the trained weights for a checkpoint
    # policy (float32 master weights with bf16 autocast on a GPU, as verl's FSDP trains; bfloat16
    # halves the memory but loses lr-1e-6 updates to rounding)
    micro_batch: int = 0
    generation_batch: int = 0
    gradient_checkpointing: bool = False
    train_dtype: Literal["float32", "bfloat16"] = "float32"


class Judge(Section):
    """The training-time rubric judge (difficulty filter and GRPO reward) for free-text items;
    items with a JSON predicate (the small profile's) are checked by rule and never sent."""
    endpoint: Endpoint = Endpoint()


class Evaluate(Section):
    repeats: int = 2                # sampled replies per held-out example (simple-evals n_repeats)
    temperature: float = 0.7
    n_bootstrap: int = 1000
    seed: int = 99
    judge: Literal["rule", "openai"] = "rule"
    endpoint: Endpoint = Endpoint()


class Agreement(Section):
    thresholds: list[float] = [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7]
    max_train_examples: int = 300   # MiniLM threshold picked on train-split rollouts only


class Report(Section):
    orbit_variant: str = "orbit_review"       # the pre-registered "ORBIT" (incremental training)
    max_base_val_score: float = 0.5          # premise P2: the base leaves headroom
    min_gain_vs_base: float = 0.15
    min_gain_vs_generic: float = 0.05


class Paper(Section):
    """paper profile: HealthBench JSONL files and models from user paths (never downloaded)."""
    enabled: bool = False
    train_jsonl: str = ""           # consultation prompts for RL (HealthBench row format)
    seed_jsonl: str = ""            # HealthBench without the Hard subset (retrieval pool)
    eval_jsonl: str = ""            # HealthBench-Hard
    policy_path: str = ""           # Qwen3-4B-Instruct-2507 (local HF folder)
    device: str = "auto"            # CUDA (bf16) when visible, else CPU


POLICY_LAYOUT = ("a save_pretrained folder of the policy, e.g. Qwen3-4B-Instruct-2507 "
                 "(config.json + model.safetensors + tokenizer.json)")
EMBEDDER_LAYOUT = ("a save_pretrained folder of the retrieval embedder, e.g. Qwen3-Embedding-0.6B "
                   "(config.json + model.safetensors + tokenizer.json)")
RERANKER_LAYOUT = ("a save_pretrained folder of a yes/no reranker, e.g. Qwen3-Reranker-0.6B "
                   "(config.json + model.safetensors + tokenizer.json), or empty for none")
JSONL_LAYOUT = "a HealthBench JSONL file (one row per line: prompt, rubrics[criterion, points, tags])"


class OrbitConfig(MethodConfig):
    seeds: list[int] = [3, 4, 5]         # pre-registered v2 seeds (v1 used 0-2)
    cases: Cases = Cases()
    rubrics: Rubrics = Rubrics()
    policy: PolicySection = PolicySection()
    filter: Filter = Filter()
    judge: Judge = Judge()
    grpo: GRPO = GRPO()
    evaluate: Evaluate = Evaluate()
    agreement: Agreement = Agreement()
    report: Report = Report()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "cases": {"n_train": 60, "n_test": 30, "n_seed_pool": 48, "n_val": 20},
        "policy": {"sft_steps": 60, "d_model": 32},
        "filter": {"rollouts": 4},
        "grpo": {"steps": 30, "prompts_per_step": 4, "group_size": 4},
        "evaluate": {"repeats": 1, "n_bootstrap": 200},
        "agreement": {"max_train_examples": 40},
    }
    PAPER: ClassVar[dict] = {
        # repo configs/training.json: n = 8, train batch 64, lr 1e-6, clip 0.2 / 0.28, response
        # <= 8192 tokens with a 4096-token overlong buffer; 2k prompts x 16 epochs / 64 = 500 steps.
        # One seed at this scale (each GRPO run is tens of GPU-hours); more by --set seeds=[...].
        "seeds": [3],
        "cases": {"source": "healthbench_jsonl"},
        # retrieval: Qwen3-Embedding from rubrics.embedder (last-token pooling, instruction on queries);
        # a Qwen3-Reranker in rubrics.reranker is optional (without it: embedding order)
        "rubrics": {"generator": "openai", "embed_max_tokens": 1024},
        "policy": {"max_response": 8192},
        # Memory on one GPU (arithmetic, not measured): fp32 master weights + grads + AdamW states of a
        # 4B model ~64 GB; 512 rollouts of up to 12k tokens per step, 2 per forward/backward (256
        # accumulated micro-batches) with activation checkpointing; generated 16 at a time (2 prompts
        # x 8: Qwen3-4B's KV cache is ~0.15 MB per token in bf16, ~29 GB for 16 x 12k tokens with
        # transformers generate; with vLLM rollouts the whole step is generated at once).
        "grpo": {"steps": 500, "prompts_per_step": 64, "group_size": 8, "lr": 1e-6, "overlong_buffer": 4096,
                 "micro_batch": 2, "generation_batch": 16, "gradient_checkpointing": True},
        "evaluate": {"judge": "openai", "repeats": 1},
        "paper": {"enabled": True},
    }

    def preflight(self) -> None:
        if self.paper.enabled:
            self._paper_paths()
        if self.free_text_rubrics and self.evaluate.judge == "rule":
            raise ValueError("orbit: generated free-text rubrics have no checkable predicates; set "
                             "evaluate.judge = openai (the rule judge needs rubrics.generator = template)")
        used = {"rubrics.endpoint": self.rubrics.generator == "openai",
                "judge.endpoint": self.free_text_rubrics,
                "evaluate.endpoint": self.evaluate.judge == "openai"}
        for key, ep in (("rubrics.endpoint", self.rubrics.endpoint), ("judge.endpoint", self.judge.endpoint),
                        ("evaluate.endpoint", self.evaluate.endpoint)):
            if used[key] and not (ep.base_url and ep.model):
                missing = f"{key}.base_url" if not ep.base_url else f"{key}.model"
                raise ValueError(f"orbit: {missing} is not set; {key}.base_url and {key}.model must name an "
                                 "OpenAI-compatible endpoint (e.g. a local vLLM server) for this profile")
        if self.rubrics.generator == "lm":
            self._need_path("rubrics.lm_path", self.rubrics.lm_path)
        for key, layout in (("embedder", EMBEDDER_LAYOUT), ("reranker", RERANKER_LAYOUT)):
            value = getattr(self.rubrics, key)
            # the paper's retrieval needs the embedder (MiniLM is the small profile's stand-in); a
            # reranker is optional; a folder set in any profile is checked
            if value or (key == "embedder" and self.paper.enabled):
                from components.common.preflight import require_checkpoint, require_tokenizer

                require_checkpoint(f"rubrics.{key}", value, layout)
                require_tokenizer(f"rubrics.{key}", value, layout)

    @property
    def free_text_rubrics(self) -> bool:
        """Generated items are free text (no JSON predicate): the training judge grades them."""
        return self.rubrics.generator != "template"

    def _paper_paths(self) -> None:
        from components.common.preflight import PreflightError, require_checkpoint, require_file, require_tokenizer
        from components.orbit.data import validate_healthbench_file

        if self.cases.source != "healthbench_jsonl":
            raise ValueError("orbit: paper.enabled needs cases.source = healthbench_jsonl (a paper profile "
                             "never runs the synthetic world)")
        if self.rubrics.generator == "template":
            raise ValueError("orbit: rubrics.generator = template writes predicates over the synthetic world's "
                             "statements; the paper profile needs rubrics.generator = openai (or lm)")
        require_checkpoint("paper.policy_path", self.paper.policy_path, POLICY_LAYOUT)
        require_tokenizer("paper.policy_path", self.paper.policy_path, POLICY_LAYOUT)
        for key in ("train_jsonl", "seed_jsonl", "eval_jsonl"):
            path = require_file(f"paper.{key}", getattr(self.paper, key), JSONL_LAYOUT)
            problem = validate_healthbench_file(str(path), need_rubrics=key != "train_jsonl")
            if problem:
                raise PreflightError(f"paper.{key}", getattr(self.paper, key), JSONL_LAYOUT, f"is malformed ({problem})")

    @staticmethod
    def _need_path(key: str, value: str) -> None:
        if not value or not Path(value).exists():
            raise FileNotFoundError(f"orbit: {key} = {value!r} does not exist; set {key} to a local "
                                    "path (nothing is downloaded at run time)")
