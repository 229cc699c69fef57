"""Params of the vig reproduction. Field defaults are the ``small`` profile."""
from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from components.common.config import MethodConfig, Section
from components.common.preflight import PreflightError, require_checkpoint, require_dir, require_file, require_tokenizer

LLAVA_JSON = ("the LLaVA-665K instruction JSON (llava_v1_5_mix665k.json: a list of {id, image?, "
              "conversations: [{from: human|gpt, value}]})")
IMAGE_ROOT = "the image root the JSON's 'image' paths are relative to (coco/, gqa/, ocr_vqa/, textvqa/, vg/)"
POPE_JSONL = ("a POPE question file (e.g. coco_pope_random.json: JSON lines of {question_id, image, "
              "text, label: yes|no})")
COCO_VAL = "the COCO val2014/ image folder (POPE's and CHAIR's 'image' names live in it)"
MMBENCH_TSV = ("MMBench's dev TSV (e.g. mmbench_dev_20230712.tsv: index, question, hint, A-D, answer, "
               "category, image as base64)")
CVBENCH_JSONL = ("CV-Bench's test.jsonl ({idx, type, task, image, question, choices, answer: '(C)', source} "
                 "with its img/ folder beside it)")
DOCVQA_JSON = ("DocVQA's val_v1.0.json ({data: [{questionId, question, image, answers}]} with its "
               "documents/ folder beside it)")
COCO_INSTANCES = "COCO's annotations/instances_val2014.json (images, annotations, categories) for CHAIR"
# what each benchmark of paper.benchmarks needs: (key, layout, file or folder)
BENCHMARK_KEYS = {
    "pope": [("pope_jsonl", POPE_JSONL, "file"), ("coco_val2014", COCO_VAL, "dir")],
    "mmbench": [("mmbench_tsv", MMBENCH_TSV, "file")],
    "cvbench": [("cvbench_jsonl", CVBENCH_JSONL, "file")],
    "docvqa": [("docvqa_json", DOCVQA_JSON, "file")],
    "chair": [("coco_instances", COCO_INSTANCES, "file"), ("coco_val2014", COCO_VAL, "dir")],
}


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


class Paper(Section):
    """The paper profile's paths and knobs (data.source = "llava"); unused by the small profile."""
    model_path: str = ""          # LLaVA-1.5 save_pretrained folder (llava-hf/llava-1.5-7b-hf): model + tokenizer
    max_samples: int = 0          # first N rows of data.llava_json (0 = all)
    max_len: int = 512            # text tokens per conversation (image tokens come on top)
    image_aspect_ratio: str = "pad"   # LLaVA-1.5: pad to square with the mean colour ("resize": plain resize)
    # evaluation: the paper's offline-scorable benchmarks (components.vig.benchmarks), each from
    # its published files; every listed one needs its keys below
    benchmarks: list[str] = ["pope", "mmbench", "cvbench", "docvqa", "chair"]
    pope_jsonl: str = ""
    coco_val2014: str = ""
    mmbench_tsv: str = ""
    cvbench_jsonl: str = ""
    docvqa_json: str = ""
    coco_instances: str = ""
    chair_images: int = 500       # CHAIR's usual 500 val2014 images, drawn with seed 0 (0 = all)
    max_eval: int = 0             # first N questions of each benchmark (0 = all)
    max_new_tokens: int = 32      # greedy short answers (DocVQA)
    caption_tokens: int = 512     # greedy detailed captions (CHAIR)
    lora_rank: int = 16           # LoRA on the decoder's attention projections (peft)
    lora_alpha: float = 32.0
    batch_size: int = 8           # forward batch for scoring and evaluation
    device: str = "auto"
    dtype: str = "auto"


class VigConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    data: Data = Data()
    model: Model = Model()
    align: Align = Align()
    reference: Reference = Reference()
    vig: Vig = Vig()
    train: Train = Train()
    claims: Claims = Claims()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"n_train": 800, "n_align": 400, "n_val": 100, "n_test": 200, "n_probe": 60},
        "model": {"d_model": 32, "d_vision": 16, "n_layers": 1, "vision_layers": 2},
        "align": {"steps": 40, "batch_size": 32},
        "reference": {"steps": 40, "batch_size": 32},
        "train": {"steps": 40, "batch_size": 32},
    }
    # Paper scale: LLaVA-1.5 on the LLaVA-665K mix and the benchmarks from user paths (components.vig.llava).
    # LoRA SFT budget is ours, not the paper's (untuned): one seed, 1000 steps of 16 conversations.
    PAPER: ClassVar[dict] = {
        "seeds": [0],
        "data": {"source": "llava"},
        "train": {"steps": 1000, "batch_size": 16, "lr": 2e-4},
        "paper": {"max_len": 1024},
    }

    def preflight(self) -> None:
        if self.data.source not in ("synthetic", "llava"):
            raise ValueError(f"data.source must be synthetic or llava (got {self.data.source!r})")
        if self.data.source != "llava":
            return
        p = self.paper
        require_checkpoint("paper.model_path", p.model_path, "a LLaVA-1.5 save_pretrained folder (config + weights)")
        require_tokenizer("paper.model_path", p.model_path, "a LLaVA-1.5 folder with its tokenizer saved beside it")
        model_type = json.loads((Path(p.model_path).expanduser() / "config.json").read_text()).get("model_type")
        if model_type != "llava":
            raise PreflightError("paper.model_path", p.model_path, "a LlavaForConditionalGeneration folder",
                                 f"holds a {model_type!r} model, not 'llava'")
        require_file("data.llava_json", self.data.llava_json, LLAVA_JSON)
        require_dir("data.image_root", self.data.image_root, IMAGE_ROOT)
        self.preflight_benchmarks()

    def preflight_benchmarks(self) -> None:
        """Each listed benchmark's paths exist and its files read in their published layout
        (a malformed file names itself, the record and the field)."""
        from components.common.readers import DatasetError
        from components.vig.benchmarks import load_suite

        for name in self.paper.benchmarks:
            if name not in BENCHMARK_KEYS:
                raise PreflightError("paper.benchmarks", name, f"a list drawn from {sorted(BENCHMARK_KEYS)}",
                                     "names an unknown benchmark")
            for key, layout, kind in BENCHMARK_KEYS[name]:
                (require_file if kind == "file" else require_dir)(f"paper.{key}", getattr(self.paper, key), layout)
            try:
                load_suite(self, name)
            except DatasetError as err:
                key, layout, _ = BENCHMARK_KEYS[name][0]
                raise PreflightError(f"paper.{key}", getattr(self.paper, key), layout, f"is malformed ({err})") from None
