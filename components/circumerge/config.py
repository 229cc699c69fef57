"""Params of the CircuMerge reproduction (our instantiation). Defaults are the ``small`` profile."""
from __future__ import annotations

from typing import ClassVar, Literal, Optional

from components.common.config import MethodConfig, Section
from components.common.hf_models import CheckpointError, check_adapter, read_config
from components.common.preflight import PreflightError, require_checkpoint, require_dir


class Data(Section):
    kind: Literal["minilm", "digits", "clip"] = "minilm"
    # minilm: synthetic text tasks from tasks.py; digits: transformed sklearn digits;
    # clip: image tasks under paper.data_root on a CLIP vision encoder (paper profile)
    tasks: list[str] = ["sentiment", "topic", "tense", "question"]
    n_train: int = 600
    n_val: int = 100               # alpha is chosen here, never on test
    n_test: int = 300
    max_tokens: int = 24
    data_seed: int = 0
    # clip: one peft adapter folder per task, <adapters_root>/<task>/ (e.g. KnOTS'); unset: trained here
    adapters_root: Optional[str] = None


class Model(Section):
    first_adapted_layer: int = 3   # MiniLM layers below this are frozen and cached
    n_layers: int = 6
    lora_targets: list[str] = ["attention.self.query", "attention.self.value",
                               "attention.output.dense", "intermediate.dense", "output.dense"]
    rank: int = 8
    lora_alpha: float = 16.0
    head_scale: float = 20.0       # cosine-similarity head temperature (zero-shot head)
    digits_hidden: int = 64
    digits_pretrain_steps: int = 300


class Train(Section):
    steps: int = 100
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.0


class Merge(Section):
    spaces: list[str] = ["full", "core", "circumerge"]
    rules: list[str] = ["ta", "ties", "tsv"]
    ties_density: float = 0.2
    tsv_fraction: Optional[float] = None   # None: 1/T of each task's directions
    sketch_factor: Optional[float] = 2.0   # s = c * Tr * ln(Tr) sampled rows / columns; None: all
    target_rank: Optional[int] = None      # None: T*r (no truncation)
    repeats: int = 5                       # merge time = median of repeats


class Tune(Section):
    # same grid for every space and rule; widened from {0.5, 1, 1.5} (0.5, the edge, was chosen
    # for every merge in the first runs) until the chosen value is interior (CLAIMS.md)
    alphas: list[float] = [0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.3]


class Timing(Section):
    """Synthetic factors at real layer shapes: merge fidelity and wall time, I/O excluded."""
    dim: int = 4096
    n_tasks: int = 8
    rank: int = 16
    n_matrices: int = 4            # the paper's model has 32 layers x 7 matrices; we time a few
    repeats: int = 9               # median of 9 (cheap at these shapes; the issue asks >= 5)
    threads: list[int] = [1, 2]    # timed at each thread count, side by side
    factor_seed: int = 0           # synthetic factors (dev measurements used another seed)
    sketch_seed: int = 0           # CircuMerge transform + sampling seed
    rules: list[str] = ["ta", "ties", "tsv"]


class Claims(Section):
    accuracy_margin: float = 1.0   # points of normalised accuracy below Core Space allowed
    time_ratio: float = 0.7        # CircuMerge / faster Core Space merge time at 4096-wide shapes
    fidelity: float = 0.1          # ||dCircuMerge - dCore|| / ||dCore|| at 4096-wide shapes
    gated_rules: list[str] = ["ties", "tsv"]   # TA is exact in any sketched space: reported only


class Paper(Section):
    """Where the paper profile's encoder and images live (nothing is downloaded)."""
    vision_model: str = ""          # CLIP (or CLIPVisionModel) save_pretrained folder: ViT-B/32, ViT-L/14
    data_root: str = ""             # <task>/{train,test}[/val]/<class>/<image> for each of data.tasks
    device: str = "auto"            # CUDA when visible, else CPU
    dtype: str = "auto"             # bf16 on GPU, fp32 on CPU
    val_size: int = 500             # held out of train per task when a task has no val folder
    max_train: Optional[int] = None   # caps per split (None: every image)
    max_val: Optional[int] = None
    max_test: Optional[int] = None
    head_shots: int = 16            # train images per class averaged into the frozen prototype head


VISION_MODEL_LAYOUT = ("a CLIP save_pretrained folder (config.json with model_type clip_vision_model "
                       "or clip + model.safetensors, e.g. openai/clip-vit-base-patch32)")
DATA_ROOT_LAYOUT = "a folder with <task>/train/<class>/<image> and <task>/test/<class>/<image> for each task"
ADAPTERS_LAYOUT = "a folder with one peft adapter folder per task: <task>/adapter_config.json + adapter_model.safetensors"


class CircumergeConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]   # transform + sampling seeds of CircuMerge
    data: Data = Data()
    model: Model = Model()
    train: Train = Train()
    merge: Merge = Merge()
    tune: Tune = Tune()
    timing: Timing = Timing()
    claims: Claims = Claims()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"kind": "digits", "tasks": ["permuted", "flipped", "rotated"],
                 "n_train": 600, "n_val": 150, "n_test": 300},
        "model": {"rank": 4, "lora_alpha": 4.0, "lora_targets": ["fc1", "fc2"],
                  "digits_pretrain_steps": 200},
        "train": {"steps": 200, "lr": 1e-2},
        "merge": {"repeats": 2},
        "tune": {"alphas": [0.5, 1.0]},
        "timing": {"dim": 512, "n_tasks": 4, "rank": 8, "n_matrices": 1, "repeats": 2, "threads": [1]},
    }
    PAPER: ClassVar[dict] = {
        # KnOTS / Core Space protocol: LoRA r = 16 on the attention projections of CLIP's vision
        # tower, 8 image tasks; ViT-L/14 by pointing paper.vision_model (and the adapters) at it
        "data": {"kind": "clip",
                 "tasks": ["cars", "dtd", "eurosat", "gtsrb", "mnist", "resisc45", "sun397", "svhn"]},
        # head temperature 100: CLIP's logit scale
        "model": {"rank": 16, "lora_alpha": 16.0, "lora_targets": ["q_proj", "k_proj", "v_proj", "out_proj"],
                  "head_scale": 100.0},
        "train": {"steps": 2000, "batch_size": 128, "lr": 1e-4},
        "timing": {"n_matrices": 224, "threads": [16]},   # 32 layers x 7 matrices
    }

    def preflight(self) -> None:
        if self.data.kind != "clip":
            if self.data.adapters_root:
                raise ValueError("data.adapters_root is set but data.kind is not clip (peft adapter "
                                 "folders are read by the CLIP paper profile only)")
            return
        folder = require_checkpoint("paper.vision_model", self.paper.vision_model, VISION_MODEL_LAYOUT)
        model_type = read_config(folder).get("model_type")
        if model_type not in ("clip_vision_model", "clip"):
            raise PreflightError("paper.vision_model", self.paper.vision_model, VISION_MODEL_LAYOUT,
                                 f"is a {model_type!r} checkpoint, not CLIP")
        patterns = tuple(f"{t}/{s}/*/*" for t in self.data.tasks for s in ("train", "test"))
        require_dir("paper.data_root", self.paper.data_root, DATA_ROOT_LAYOUT, patterns)
        if self.data.adapters_root:
            root = require_dir("data.adapters_root", self.data.adapters_root, ADAPTERS_LAYOUT)
            for task in self.data.tasks:
                try:
                    check_adapter(root / task)
                except CheckpointError:
                    raise PreflightError("data.adapters_root", self.data.adapters_root, ADAPTERS_LAYOUT,
                                         f"has no peft adapter for task {task!r} at {task}/") from None
