"""Params of the vig reproduction. Field defaults are the ``small`` profile."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from components.common.config import MethodConfig, Section


class Data(Section):
    """Generated scenes: a small, faint, colour-jittered object left/right on a cropped photo
    background, with a distractor bar (see components.vig.data)."""
    image_size: int = 16
    object_side: int = 5
    contrast_min: float = 0.15    # object opacity ~ U(contrast_min, contrast_max):
    contrast_max: float = 1.0     # calibrated on val (CLAIMS.md)
    color_jitter: float = 20.0
    distractor: bool = True
    n_train: int = 6000
    n_align: int = 3000           # stage-1 captions of an unnamed object (uniform colours)
    n_val: int = 600              # colour questions, 50 % bias-conflicting: calibration + premises
    n_test: int = 1200            # colour questions, 50 % bias-conflicting
    n_probe: int = 300            # caption probes for the matching / partial / conflicting VIG table
    prior_prob: float = 0.9       # colour follows the noun's prior this often in training data
    mix: dict[str, float] = {"caption": 0.3, "color": 0.25, "position": 0.2, "chit": 0.15, "text": 0.1}
    data_seed: int = 1234
    source: str = "synthetic"    # "llava": the paper profile's instruction mix on disk
    llava_json: str = ""
    image_root: str = ""


class Model(Section):
    """A LLaVA-shaped model from transformers' config classes: CLIP vision tower -> 2-layer MLP
    projector -> Llama decoder (LlavaForConditionalGeneration), tiny and randomly initialised."""
    patch: int = 4
    d_vision: int = 32
    vision_layers: int = 2
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2


class Align(Section):
    """Stage 1: caption-only alignment of encoder + projector (+ LM, which has no pre-training here)."""
    steps: int = 600
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0


class Reference(Section):
    """Vanilla stage-2 model that scores VIG (trained once; scores are reused by every arm)."""
    steps: int = 300
    batch_size: int = 64
    lr: float = 2e-3
    seed: int = 0


class Vig(Section):
    blur_sigma_frac: float = 0.25    # Gaussian blur sigma as a fraction of the image side
    keep_percent: float = 70.0       # p: keep the top-p % multimodal samples; tau_p also masks tokens


class Train(Section):
    """Stage-2 arms, all from the same stage-1 checkpoint with the same steps and batch size."""
    variants: list[str] = ["vanilla", "random", "vig"]
    steps: int = 400
    batch_size: int = 64
    lr: float = 2e-3


class Claims(Section):
    conflict_gain_pts: float = 3.0     # (b) VIG - vanilla on bias-conflicting colour questions
    aligned_tolerance_pts: float = 1.0  # (b) VIG within this of vanilla on bias-aligned ones
    token_fraction_max: float = 0.60   # (b) VIG supervised tokens / vanilla supervised tokens
    random_gain_pts: float = 3.0       # (b) VIG - random on bias-conflicting
    grounded_ratio_min: float = 3.0    # (a) grounded-token d_t vs template-token |d_t|
    blur_gap_gain_pts: float = 3.0     # (c) image-vs-blurred gap, VIG minus vanilla
    # premises (validation / training data): vision is uncertain and the prior matters
    premise_conflict_min: float = 50.0  # vanilla's val accuracy on bias-conflicting questions ...
    premise_conflict_max: float = 80.0  # ... lies in this band
    premise_blur_prior_min: float = 50.0  # blurred-image answers that are the noun's prior colour (%)


class VigConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    data: Data = Data()
    model: Model = Model()
    align: Align = Align()
    reference: Reference = Reference()
    vig: Vig = Vig()
    train: Train = Train()
    claims: Claims = Claims()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"n_train": 800, "n_align": 400, "n_val": 100, "n_test": 200, "n_probe": 60},
        "model": {"d_model": 32, "d_vision": 16, "n_layers": 1, "vision_layers": 2},
        "align": {"steps": 40, "batch_size": 32},
        "reference": {"steps": 40, "batch_size": 32},
        "train": {"steps": 40, "batch_size": 32},
    }
    # Paper scale: LLaVA-1.5 on the LLaVA-665K mix from user paths. Not wired yet: preflight stops
    # the run in one line rather than building a random 7B-shaped toy.
    PAPER: ClassVar[dict] = {"data": {"source": "llava"}}

    def preflight(self) -> None:
        if self.data.source != "llava":
            return
        for key in ("llava_json", "image_root"):
            value = getattr(self.data, key)
            if not value or ("://" not in value and not Path(value).exists()):
                raise FileNotFoundError(
                    f"vig paper profile: data.{key}={value!r} is missing; set it to the LLaVA-665K "
                    f"instruction JSON / the COCO+GQA+VG image root")
        raise NotImplementedError(
            "vig paper profile: the LLaVA-1.5 / LLaVA-665K path is not wired yet; only the small "
            "and smoke profiles run")
