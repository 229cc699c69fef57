"""Params of the tricd reproduction. Defaults are the ``small`` profile."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from components.common.config import MethodConfig, Section


class Bench(Section):
    """The procedural OmniVCHall-like benchmark (components/tricd/video.py, benchmark.py)."""
    frames: int = 8
    size: int = 32                     # frames are size x size RGB (objects ~7 px wide)
    world: int = 24                    # the camera looks at a world canvas this big
    # videos per split: `pretrain` stands in for the backbone's own (biased) training data;
    # `train` / `val` / `test` are the benchmark splits (balanced), as in OmniVCHall
    n_pretrain: int = 5000             # fresh videos: with 2,000 the backbone fitted the prior only
    n_train: int = 400
    n_val: int = 150
    n_test: int = 500
    qa_per_task_pretrain: int = 2      # QA per video and task (s_yn, c_yn, s_mc, c_mc)
    qa_per_task_eval: int = 1
    # Disclosed language bias of the pretrain split only: yes-rate (and the rate at which an
    # adversarial MC option is the answer) is 0.5 + bias (1/3 + bias) for these types.
    bias: float = 0.35
    biased_types: list[str] = ["temporal", "camera", "action", "event"]
    adversarial_rate: float = 0.67     # share of MC items whose option C is "none"/"all"
    seed: int = 2026


class Backbone(Section):
    """The toy video LLM: patch tokens + word tokens -> causal transformer -> answer token."""
    patch: int = 4                     # 4x4 pixel patches ...
    merge: int = 4                     # ... merged 4x4 into one visual token (16x16 px, 4 a frame)
    tpatch: int = 2                    # frames per tubelet (Qwen2-VL's temporal patch size)
    grounding_weight: float = 1.0      # vision-tower pretraining loss (token colour-shape, scene)
    align: bool = True                 # projector adds the word embeddings of what it grounds
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    steps: int = 1000
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup: int = 100
    caption_batch: int = 32            # grounding / captioning videos per step
    caption_weight: float = 0.0        # captioning (v1) off: it doubled the step time (dev runs e, f)
    seed: int = 0                      # one frozen backbone; criteria seeds vary the policy


class Saliency(Section):
    motion_sigma: float = 1.0          # spatial Gaussian on the flow magnitude (official: 1)
    motion_window: int = 2             # temporal window (official: 2)
    low_std: float = 0.1               # soft threshold mean + low*std .. mean + high*std
    high_std: float = 0.9
    lk_sigma: float = 1.5              # Lucas-Kanade integration window


class Policy(Section):
    """Router (adaptive perturbation controller) + gater, trained with REINFORCE."""
    n_queries: int = 16
    d_router: int = 64
    router_threshold: float = 0.4
    train_std: float = 0.1             # gater action beta ~ N(mu, 0.1), clamped to [0, 1]
    a1: float = 1.0                    # positive pathway weight (official code: 1)
    a2: float = 1.0                    # negative pathway weight (official code: 1)
    grad_accum: int = 32
    lr: float = 2e-3                   # official 1e-5 for a router on a frozen 8B VLLM; ours is
                                       # trained from scratch with ~100x fewer updates
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    baseline_momentum: float = 0.95
    entropy_coef: float = 0.05         # entropy bonus on the tool decisions (not in the official
                                       # code; the small run's router collapsed without it)
    max_epochs: int = 8
    min_epochs: int = 2
    patience: int = 2
    val_limit: int = 256
    train_limit: int = 1800
    shuffle_seed: int = 2025
    noise_std: float = 25.0            # on the 0..255 scale (official N(0, 25))
    blur_sigma: float = 1.0            # official kernel 15 at ~224 px; scaled to 16 px frames
    sample_keep: float = 0.4
    vcd_tool: str = "noise"            # the fixed-perturbation VCD baseline


class Evaluate(Section):
    random_router_seed: int = 7


class Paper(Section):
    """paper profile: a real video LLM and the released OmniVCHall videos and QA."""
    enabled: bool = False
    model_path: str = ""               # e.g. a local Qwen3-VL-8B-Instruct snapshot
    data_root: str = ""                # OmniVCHall: videos/ and {train,val,test}/*.json
    dino_path: str = ""                # DINOv3 ViT-L/16 for the visual saliency


class TricdConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    bench: Bench = Bench()
    backbone: Backbone = Backbone()
    saliency: Saliency = Saliency()
    policy: Policy = Policy()
    evaluate: Evaluate = Evaluate()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "bench": {"n_pretrain": 160, "n_train": 48, "n_val": 24, "n_test": 40},
        "backbone": {"steps": 60, "n_layers": 1, "d_model": 32, "batch_size": 32, "warmup": 10,
                     "caption_batch": 16},
        "policy": {"max_epochs": 2, "min_epochs": 1, "grad_accum": 8, "d_router": 32,
                   "n_queries": 4, "val_limit": 64},
    }
    PAPER: ClassVar[dict] = {
        "paper": {"enabled": True},
        "policy": {"lr": 1e-5, "max_epochs": 5, "min_epochs": 2},
    }

    def preflight(self) -> None:
        if not self.paper.enabled:
            return
        for key, value in (("paper.model_path", self.paper.model_path),
                           ("paper.data_root", self.paper.data_root),
                           ("paper.dino_path", self.paper.dino_path)):
            if not value or not Path(value).exists():
                raise FileNotFoundError(
                    f"tricd paper profile: {key} = {value!r} does not exist; set {key} to a local "
                    "path (no downloads at run time). The paper profile needs a video LLM "
                    "(e.g. Qwen3-VL-8B-Instruct), the OmniVCHall release and DINOv3 ViT-L/16.")
        raise NotImplementedError(
            "tricd paper profile: the adapter from a Hugging Face video LLM to the three-pass "
            "decoder is not built yet (components/tricd/decode.py works on the toy backbone)")
