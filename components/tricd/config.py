"""Params of the tricd reproduction. Defaults are the ``small`` profile."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

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
    seed: int = 2030                   # v12: fresh splits (v5 2029; v4 2028; v3 2027; v2 2026, also the dev pretrain seed)


class Backbone(Section):
    """The toy video LLM: patch tokens + word tokens -> causal transformer -> answer token."""
    patch: int = 4                     # 4x4 pixel patches ...
    merge: int = 4                     # ... merged 4x4 into one visual token (16x16 px, 4 a frame)
    tpatch: int = 2                    # frames per tubelet (Qwen2-VL's temporal patch size)
    context: int = 1                   # v7: patches of context around each token's block read by
                                       # the merger (0 = v1-v6: its own m x m block only)
    pixel_colour: bool = True          # v7: per-pixel colour membership in each patch's input (a colour
                                       # mask: shape and sub-patch motion visible); false = patch mean
    ground_pos_weight: float = 5.0     # v7: BCE weight of positive grounding labels (1 = v1-v6)
    ground_token_weight: float = 10.0  # v7: weight of that per-token BCE (a mean over 17 classes) against
                                       # the scene (and camera) cross-entropy (1 = v1-v6)
    feat_scale: float = 0.0            # v7: >= 0: the tower features enter the projector layer-normed and
                                       # scaled by this (0 = only the words of what it grounds); -1 = raw
                                       # (v1-v6: norm 30-50 against ~1 for the word part)
    ground_camera: bool = True         # v7: the tower also learns the video's camera operation and the
                                       # projector adds its words to every token (false = v1-v6)
    grounding_weight: float = 1.0      # vision-tower pretraining loss (token colour-shape, scene)
    align: bool = True                 # projector adds the word embeddings of what it grounds
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    steps: int = 2400                  # QA steps (v5, tower frozen; v1-v4: 1,000 joint steps)
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup: int = 100
    caption_batch: int = 32            # grounding / captioning videos per step
    caption_weight: float = 0.0        # captioning (v1) off: it doubled the step time (dev runs e, f)
    yn_first: float = 0.5              # share of the steps on yes/no items only (curriculum; CLAIMS
                                       # "Calibration v3" / "v5"; v3-v4 0.6)
    video_first: bool = True           # token order [video][question][<ans>] (v1-v4: question first)
    tower_steps: int = 800             # > 0: the vision tower is pretrained alone this many steps, then
                                       # frozen while the LM learns QA (0 = joint training, v1-v4)
    tower_batch: int = 64              # videos per vision-tower step
    lm: str = "packed"                 # v9: language side. "causal" = the toy (v1-v8, left-padded, no mask);
                                       # "packed" = the same causal toy with each row's pads after <ans>;
                                       # "reader" = VQA-style reader (reader.ReaderVLLM)
    n_enc: int = 2                     # v9 reader: bidirectional question-encoder blocks
    hops: int = 2                      # v9 reader: co-attention rounds (visual <-> question)
    pretrain_qa_per_task: int = 20     # v9: > 0: the QA phase draws this many fresh items per task and
                                       # pretrain video from the scene programs (same bias); 0 = the split's own
    compound: bool = True              # v10: the toy tokenizer merges "<colour> <shape>" into one id and the
                                       # projector adds that id's embedding per grounded pair (false = v1-v9)
    aux_clause: float = 1.0            # v12: > 0: weight of the clause-truth loss at every clause's last word
                                       # (needs video_first, lm packed, pretrain_qa_per_task; 0 = v1-v11)
    mimetic: bool = True               # v11: mimetic attention init of the LM (model.mimetic_init; false = v1-v10)
    seed: int = 4                      # v12: fresh; one frozen backbone (v5: fresh; v4 2; v3 1); criteria seeds vary the policy


class Saliency(Section):
    motion_sigma: float = 1.0          # spatial Gaussian on the flow magnitude (official: 1)
    motion_window: int = 2             # temporal window (official: 2)
    low_std: float = 0.1               # soft threshold mean + low*std .. mean + high*std
    high_std: float = 0.9
    lk_sigma: float = 1.5              # Lucas-Kanade integration window
    pool_px: int = 1                   # maps stored average-pooled by this many pixels (paper: 14)


class Policy(Section):
    """Router (adaptive perturbation controller) + gater, trained with REINFORCE."""
    n_queries: int = 16
    d_router: int = 64
    gater_hidden: list[int] = [64, 16]   # official 256, 64 on a 4096-wide backbone
    router_threshold: float = 0.4
    tool_ids: bool = True              # learned per-tool embedding in the router (official; v1-v3 lacked it)
    tool_id_std: float = 0.1           # its init scale (v5, bandit probe: 5 of 5 seeds route per context;
                                       # 1.0 = torch's N(0, 1), v4: 1 of 5)
    train_std: float = 0.1             # gater action beta ~ N(mu, 0.1), clamped to [0, 1]
    a1: float = 1.0                    # positive pathway weight (official code: 1)
    a2: float = 1.0                    # negative pathway weight (official code: 1)
    grad_accum: int = 32
    lr: float = 2e-4                   # official 1e-5; v1-v3 2e-3 saturated the router under noise
                                       # (v4 calibration on dev val -> 2e-5; v5 on the v5 dev backbone,
                                       # tool_id_std 0.1: 2e-5 vs 2e-4 -> 2e-4)
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    baseline_momentum: float = 0.95
    baseline: Literal["ema", "base_answer"] = "ema"  # ema: b = EMA of the rewards (official); base_answer: b = the
                                       # reward of the undecoded answer q_o on the same query, so the
                                       # advantage is zero wherever decoding leaves it right or wrong
    entropy_coef: float = 0.0          # entropy bonus on the tool decisions (not in the official code);
                                       # v3 calibration on dev val: 0, 0.05, 0.5 all collapse -> 0
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
    """paper profile: a Qwen2-VL-family video LLM and the OmniVCHall release, both local.

    Layout of ``data_root`` (the official repository's ``dataset/MyBench``):
    ``{train,val,test}/{split}_{s_ynqa,m_ynqa,s_mcqa,m_mcqa}.json`` and the videos as
    ``all_video/<video_id>.mp4`` (``video_dir`` overrides the video folder)."""
    enabled: bool = False
    model_path: str = ""               # Qwen2-VL / Qwen2.5-VL save_pretrained folder (+ tokenizer)
    data_root: str = ""                # OmniVCHall: {train,val,test}/*.json
    video_dir: str = ""                # "" = <data_root>/all_video
    dino_path: str = ""                # DINOv3 ViT-L/16 (or DINOv2) folder for the visual saliency
    visual_saliency: str = "dino"      # dino (official) | spectral (the small profile's substitute)
    device: str = "auto"               # auto: CUDA when present
    dtype: str = "auto"                # auto: bf16 on GPU
    batch_size: int = 2                # (video, question) rows per backbone forward
    num_frames: int = 16               # frames decoded per video, evenly spaced (official: 2 fps)
    frame_size: int = 336              # frames resized to this square (a multiple of 28 for Qwen2-VL)
    seconds_per_frame: float = 0.5     # Qwen2.5-VL temporal RoPE (official sampling: 2 fps)
    train_limit: int = -1              # questions read per split (-1 = all; a stratified cut)
    val_limit: int = -1
    test_limit: int = -1
    type_names: dict[int, str] = {1: "action", 2: "scene", 3: "object", 4: "relation",
                                  5: "attribute", 6: "event", 7: "temporal", 8: "camera"}


class TricdConfig(MethodConfig):
    seeds: list[int] = [12, 13, 14]    # v12 policy seeds (fresh; v5 9, 10, 11; v4 6, 7, 8; v3 3, 4, 5; v1/v2 0, 1, 2)
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
                     "caption_batch": 16, "tower_steps": 20, "tower_batch": 16},
        "policy": {"max_epochs": 2, "min_epochs": 1, "grad_accum": 8, "d_router": 32,
                   "n_queries": 4, "val_limit": 64},
    }
    PAPER: ClassVar[dict] = {
        "paper": {"enabled": True},
        # official trainer: lr 1e-5, 2-5 epochs, patience 2, 1,800 training QA, 256 val QA; tools
        # at the frame scale of the release (blur: OpenCV kernel 15 -> sigma 2.6)
        "policy": {"lr": 1e-5, "max_epochs": 5, "min_epochs": 2, "d_router": 1024, "gater_hidden": [256, 64],
                   "blur_sigma": 2.6, "entropy_coef": 0.0},
        "saliency": {"pool_px": 14},
    }

    def preflight(self) -> None:
        """paper profile: the model folder, the release's layout and the DINO folder must exist
        (one line naming the key and the layout; nothing runs before)."""
        if not self.paper.enabled:
            return
        from components.common.hf_models import read_config
        from components.common.preflight import (PreflightError, require_checkpoint, require_dir,
                                                 require_tokenizer)
        from components.tricd.paper_data import SPLITS, TASK_FILES

        p = self.paper
        what = "a Qwen2-VL or Qwen2.5-VL save_pretrained folder with its tokenizer (e.g. Qwen2.5-VL-7B-Instruct)"
        require_checkpoint("paper.model_path", p.model_path, what)
        require_tokenizer("paper.model_path", p.model_path, what)
        conf = read_config(p.model_path)
        if conf.get("model_type") not in VIDEO_LLM_TYPES:
            raise PreflightError("paper.model_path", p.model_path, what,
                                 f"is a {conf.get('model_type')!r} checkpoint, not one of {', '.join(VIDEO_LLM_TYPES)}")
        vision = conf.get("vision_config", {})
        factor = vision.get("patch_size", 14) * vision.get("spatial_merge_size", 2)
        if p.frame_size % factor:
            raise PreflightError("paper.frame_size", str(p.frame_size), f"a multiple of {factor} "
                                 "(patch_size * spatial_merge_size of the model)", "is not a multiple")
        layout = ("the OmniVCHall release: {train,val,test}/<split>_{s_ynqa,m_ynqa,s_mcqa,m_mcqa}.json "
                  "and videos in all_video/<video_id>.mp4")
        require_dir("paper.data_root", p.data_root, layout,
                    tuple(f"{s}/{s}_{f}.json" for s in SPLITS for f in TASK_FILES.values()))
        if p.video_dir:
            require_dir("paper.video_dir", p.video_dir, "the folder of <video_id>.mp4 files", ("*.*",))
        else:
            require_dir("paper.data_root", p.data_root, layout, ("all_video/*.*",))
        if p.visual_saliency not in ("dino", "spectral"):
            raise PreflightError("paper.visual_saliency", p.visual_saliency, "dino or spectral", "is not known")
        if p.visual_saliency == "dino":
            require_checkpoint("paper.dino_path", p.dino_path,
                               "a DINOv3 ViT (or DINOv2) save_pretrained folder, e.g. dinov3-vitl16-pretrain-lvd1689m")


VIDEO_LLM_TYPES = ("qwen2_vl", "qwen2_5_vl")
