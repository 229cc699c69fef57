"""Params of the anompi reproduction. Defaults are the ``small`` profile.

Every constant here is our reconstruction: the paper's full text (operators, AEI utility,
iDPO loss, datasets) was not available; see CLAIMS.md.
"""
from __future__ import annotations

from typing import ClassVar

from components.common.config import MethodConfig, Section

CLASSES = ("normal", "running", "fighting", "loitering", "falling", "object_left")


class Env(Section):
    """The procedural surveillance environment (components/anompi/video.py)."""
    n_frames: int = 128            # T
    size: int = 12                 # frames are size x size gray images
    n_train: int = 1500
    n_val: int = 1200              # calibration and premise checks only
    n_test: int = 600
    walkers: tuple[int, int] = (2, 4)          # background walkers per video (inclusive)
    actor_len: tuple[int, int] = (24, 32)      # frames the "actor" is on screen
    event_len: tuple[int, int] = (6, 10)       # the anomaly itself: a short window
    distractor_rate: float = 0.5   # share of normal videos where an actor walks through
    noise: float = 0.03            # sensor noise per pixel
    # static-event visibility, calibrated on validation so a single frame shows the event
    # (premise P1; CLAIMS.md "Calibration"); v1: (1.8, 0.5), a +-2 px box, 0.45, 0.9
    fall_sigma: tuple[float, float] = (3.0, 0.9)       # (y, x) sigmas of the fallen actor
    object_offset: tuple[float, float] = (3.0, 4.0)    # px from the actor
    object_sigma: float = 1.0
    object_intensity: float = 1.0
    # one generator seed per split; test_seed was drawn for v2 and no pilot has seen it
    seed: int = 20260              # train
    val_seed: int = 31337
    test_seed: int = 90417


class Perception(Section):
    """Frozen clip encoder + belief head, trained under video-level labels only."""
    emb_dim: int = 16
    hidden: int = 64
    steps: int = 2500
    batch_videos: int = 64
    lr: float = 3e-3
    seed: int = 0


class Passive(Section):
    """One belief head per passive sampler (uniform-k, pairs-k), trained on its own frames."""
    steps: int = 300               # full-batch Adam steps per head
    lr: float = 1e-2
    weight_decay: float = 1e-4
    seed: int = 0


class Policy(Section):
    """Operators and the policy network (shared by every policy stage and evaluate)."""
    n_anchors: int = 8             # the initial passive scan: uniform frames
    fine_len: int = 4              # fine-grained sampling: consecutive frames per window
    max_steps: int = 5             # K operator calls before a forced answer
    budget: int = 24               # hard cap on frames viewed (initial scan included)
    hidden: int = 64


class Sft(Section):
    """Warm start: behaviour cloning of a scripted local search (scan, FINE at max saliency,
    BACKTRACK, ADVANCE, answer)."""
    steps: int = 300
    batch: int = 256
    lr: float = 3e-3
    label_smoothing: float = 0.1
    saliency_threshold: float = 0.5   # the script answers at once when nothing on screen is salient


class Rollout(Section):
    """On-policy sampling of trajectories (vectorised over videos)."""
    n_videos: int = 600           # training videos per round
    per_video: int = 8             # M trajectories per video
    temperature: float = 1.0
    epsilon: float = 0.2           # uniform exploration over valid operators
    batch: int = 4096


class Idpo(Section):
    """AEI utility, preference pairs and the iDPO update."""
    variants: list[str] = ["full", "no_info", "no_cost"]
    lambda_info: float = 0.3       # weight of the belief-entropy reduction (non-negative per step)
    lambda_cost: float = 0.1       # weight of frames acquired / budget (0.5 in the pilot: see CLAIMS.md)
    margin: float = 0.05           # a pair needs U(winner) - U(loser) > margin
    outcome_pairs: int = 2         # per video: correct over wrong at (nearly) equal frames
    cost_groups: list[str] = ["correct"]   # per video and success group: best over worst U
    rounds: int = 3                # round 1 uses the rollout/build_preferences stages
    beta: float = 0.5
    lr: float = 2e-3
    epochs: int = 10
    batch: int = 128


class Evaluate(Section):
    passive_frames: list[int] = [8, 12, 16, 20, 24, 28, 32, 48, 64]


class Paper(Section):
    """paper profile: a Qwen2-VL video LLM as the viewing policy on UCF-Crime / XD-Violence
    (components/anompi/paper_stages.py). Nothing is bundled or downloaded."""
    enabled: bool = False
    model_path: str = ""           # a Qwen2-VL save_pretrained folder, e.g. Qwen2-VL-2B-Instruct
    dataset: str = "ucf_crime"     # ucf_crime | xd_violence (published layouts: vau_data.py)
    dataset_root: str = ""
    n_frames: int = 128            # T: frames decoded per video at uniform positions
    frame_size: int = 224          # square side after resizing (Qwen2-VL: 64 visual tokens)
    max_videos: int = 0            # per split, 0 = all (a seeded subset otherwise)
    val_share: float = 0.1         # validation: a seeded share of the training list
    device: str = "auto"           # CUDA when visible
    dtype: str = "auto"            # bf16 on GPU, fp32 on CPU
    lora_rank: int = 16            # policies are LoRA adapters on the frozen checkpoint
    sft_videos: int = 600          # scripted chats for the warm start
    sft_steps: int = 600
    sft_lr: float = 1e-4
    dpo_lr: float = 5e-6
    dpo_batch: int = 8             # pairs per optimizer step
    dpo_micro_batch: int = 1       # pairs per forward/backward (gradients accumulate to dpo_batch)
    thought_tokens: int = 48       # free-text thought before each operator (0 = none)
    score_batch: int = 8           # candidate strings scored per forward


class AnompiConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    env: Env = Env()
    perception: Perception = Perception()
    passive: Passive = Passive()
    policy: Policy = Policy()
    sft: Sft = Sft()
    rollout: Rollout = Rollout()
    idpo: Idpo = Idpo()
    evaluate: Evaluate = Evaluate()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "env": {"n_frames": 64, "n_train": 160, "n_val": 40, "n_test": 40, "actor_len": [16, 20],
                "test_seed": 4242},
        "perception": {"steps": 60, "batch_videos": 16},
        "policy": {"n_anchors": 4, "max_steps": 3, "budget": 16},
        "sft": {"steps": 30},
        "rollout": {"n_videos": 60, "per_video": 4},
        "idpo": {"rounds": 1, "epochs": 1},
        "evaluate": {"passive_frames": [4, 8, 16, 32]},
    }
    PAPER: ClassVar[dict] = {
        "paper": {"enabled": True},
        "sft": {"saliency_threshold": 0.0},     # the script always searches (saliency is relative)
        "rollout": {"n_videos": 400, "per_video": 8},
        "idpo": {"rounds": 2, "epochs": 2},
        "evaluate": {"passive_frames": [8, 16, 24, 32]},
    }

    def preflight(self) -> None:
        """Paper profile: the checkpoint must be a Qwen2-VL folder with its tokenizer and image
        processor, and the data set root must hold the published layout (one line, naming the key)."""
        if not self.paper.enabled:
            return
        from components.anompi.vau_data import LAYOUTS
        from components.common.hf_models import read_config
        from components.common.preflight import (PreflightError, require_checkpoint, require_dir,
                                                 require_tokenizer)

        p = self.paper
        what = "a Qwen2-VL save_pretrained folder (e.g. Qwen2-VL-2B-Instruct)"
        require_checkpoint("paper.model_path", p.model_path, what)
        require_tokenizer("paper.model_path", p.model_path, what)
        require_dir("paper.model_path", p.model_path, what + " with preprocessor_config.json",
                    ("preprocessor_config.json",))
        model_type = read_config(p.model_path).get("model_type")
        if model_type not in VIDEO_LLM_TYPES:
            raise PreflightError("paper.model_path", p.model_path, what,
                                 f"is a {model_type!r} checkpoint, not one of {', '.join(VIDEO_LLM_TYPES)}")
        if p.dataset not in LAYOUTS:
            raise PreflightError("paper.dataset", p.dataset, " or ".join(LAYOUTS), "is not a known data set")
        require_dir("paper.dataset_root", p.dataset_root, LAYOUTS[p.dataset], DATASET_PATTERNS[p.dataset])
        check_video_lists(p.dataset, p.dataset_root)


def check_video_lists(dataset: str, root: str) -> None:
    """Every listed video resolves (a file or a frame folder), both splits are non-empty, and
    video files have their decoder (PyAV, the paper extra) installed."""
    import importlib.util
    from pathlib import Path

    from components.anompi.vau_data import LAYOUTS, VideoDataError, list_videos
    from components.common.preflight import PreflightError

    try:
        lists = list_videos(dataset, root)
    except VideoDataError as err:
        raise PreflightError("paper.dataset_root", root, LAYOUTS[dataset], f"does not match it ({err})") from None
    for split, rows in lists.items():
        if not rows:
            raise PreflightError("paper.dataset_root", root, LAYOUTS[dataset], f"lists no {split} video")
    files = any(Path(r["path"]).is_file() for rows in lists.values() for r in rows)
    if files and importlib.util.find_spec("av") is None:
        raise PreflightError("paper.dataset_root", root, LAYOUTS[dataset] + ", with PyAV installed (pip install av)",
                             "holds video files but PyAV, their decoder, is not installed")


VIDEO_LLM_TYPES = ("qwen2_vl", "qwen2_5_vl")
DATASET_PATTERNS = {"ucf_crime": ("**/Anomaly_Train.txt", "**/Anomaly_Test.txt"),
                    "xd_violence": ("train/*_label_*", "test/*_label_*")}
