"""Params of the selfsoup reproduction. Field defaults are the ``small`` profile."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import model_validator

from components.common.config import MethodConfig, Section

CORRUPTIONS = ["gaussian_noise", "shot_noise", "impulse_noise", "gaussian_blur",
               "contrast", "brightness", "pixelate", "elastic"]
# ImageNet-C's 15 benchmark corruptions (its folder names), read from disk in the paper profile
IMAGENET_C = ["gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur",
              "zoom_blur", "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate",
              "jpeg_compression"]

# the official recipe grid (7 ingredients); the small profile leaves mmcr_local out (InterTrain)
ALL_INGREDIENTS = ["mae_lr1", "mae_lr2", "moco_t0p1", "moco_t1", "mmcr_global", "mmcr_local", "lejepa"]


class Data(Section):
    # digits: embedded (small); minivtab / imagefolder: the paper's data from disk (paper_data.py)
    source: Literal["digits", "minivtab", "imagefolder"] = "digits"
    root: str = ""                       # paper: mini-VTAB snapshot or ImageNet-layout folder
    task: str = ""                       # paper, minivtab: the task folder (e.g. cifar100)
    corrupted_root: str = ""             # paper: ImageNet-C-layout folder of the task's corruptions
    max_test: int = 0                    # paper: cap on the clean test set and each corrupted set (0 = all)
    split_seed: int = 0                  # one fixed split; seeds vary everything downstream
    image_size: int = 16                 # 8x8 digits upsampled
    # stock source: grey crops of scikit-image's bundled photographs (disjoint from and shifted
    # against the digits); side of the square crop in photo pixels, before downsampling
    n_source: int = 4000
    source_crop_sides: tuple[int, int] = (16, 64)
    source_seed: int = 0
    n_train: int = 300                   # few labels (low-label regime avoids saturation)
    # model selection + premise checks; the rest (997) is test. 500, not 200: with 200 the
    # val accuracy of two fine-tunes of one model differing only in batch order differed by
    # 4 points (dev seed 101), as large as the ingredient-vs-stock gaps the premises judge
    n_val: int = 500
    corruptions: list[str] = CORRUPTIONS
    severities: list[int] = [1, 2, 3, 4, 5]
    corruption_seed: int = 0
    # the shift the robustness arm adapts to (unlabelled corrupted *test* images)
    shift_corruptions: list[str] = ["gaussian_noise", "gaussian_blur", "contrast", "pixelate"]
    shift_severity: int = 3


class Model(Section):
    patch: int = 4
    dim: int = 32
    depth: int = 2
    heads: int = 2
    decoder_dim: int = 16
    decoder_depth: int = 1
    num_classes: int = 10
    # the fields above shape the tiny ViT; with stock.checkpoint set the architecture is the
    # checkpoint's own (its config.json) and only num_classes is read
    device: str = "cpu"                  # "auto" (paper): CUDA when visible, else CPU


class Augment(Section):
    crop_scale: tuple[float, float] = (0.5, 1.0)   # random resized crop (area fraction)
    rotation_deg: float = 10.0
    noise_std: float = 0.05


class Stock(Section):
    """MAE pre-training of the stock on the natural-image source (paper: a public MAE ViT-B/16)."""
    checkpoint: str = ""                 # paper: ViTMAEForPreTraining folder (encoder + decoder), read by pretrain_stock
    steps: int = 1500
    batch: int = 128
    lr: float = 2e-3
    weight_decay: float = 0.05
    mask_ratio: float = 0.75
    probe_c: float = 1.0                 # inverse L2 strength of the linear-probe head init


class Recipe(Section):
    algo: Literal["mae", "moco", "mmcr", "lejepa"]
    lr: float
    mask_ratio: float = 0.75             # mae
    temperature: float = 0.1             # moco
    local: bool = False                  # mmcr
    lam: float = 0.02                    # lejepa
    views: int = 4                       # lejepa
    num_slices: int = 64                 # lejepa (256 in the paper; embeddings here are 32-d)
    # mae (v6 calibration knobs; defaults = v5's recipe): per-patch normalised pixel targets
    # (He et al.'s norm_pix_loss), a freshly initialised decoder instead of the stock's, and
    # whether the view augmentation of inter_train.augment is applied to the MAE input
    norm_pix: bool = False
    fresh_decoder: bool = False
    augment: bool = True


class InterTrain(Section):
    """SSL inter-training that turns the stock into ingredients, on the downstream task's
    unlabelled train + val images."""
    # mmcr_local (MMCR global+local) is left out of the small profile: at this scale its local
    # term collapses the projection head on every seed (loss sqrt(2) - 1/sqrt(B), head outputs'
    # mean cosine 0.9999), leaving a copy of the stock; the paper profile keeps it (CLAIMS.md)
    ingredients: list[str] = ["mae_lr1", "mae_lr2", "moco_t0p1", "moco_t1", "mmcr_global", "lejepa"]
    # learning rates and steps calibrated on dev seeds' validation split (CLAIMS.md)
    recipes: dict[str, Recipe] = {
        # v9: the two MAE ingredients are mask 0.5 and mask 0.25 at lr 1.25e-4 (v7's selected set;
        # names kept so the other profiles and the robustness arm keep their keys; v5: mask 0.75 at
        # lr 1.25e-4 / 2.5e-4). The paper profile sets its own recipes (mask 0.75)
        "mae_lr1": Recipe(algo="mae", lr=1.25e-4, mask_ratio=0.5),
        "mae_lr2": Recipe(algo="mae", lr=1.25e-4, mask_ratio=0.25),
        "moco_t0p1": Recipe(algo="moco", lr=2.5e-4, temperature=0.1),
        "moco_t1": Recipe(algo="moco", lr=2.5e-4, temperature=1.0),
        "mmcr_global": Recipe(algo="mmcr", lr=1.25e-4, local=False),
        "mmcr_local": Recipe(algo="mmcr", lr=1.25e-4, local=True),
        "lejepa": Recipe(algo="lejepa", lr=1.25e-4, lam=0.02, views=4),
    }
    steps: int = 600
    batch: int = 64
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_frac: float = 0.1
    augment: Augment = Augment()


class Robustness(Section):
    """Self-souping on unlabelled corrupted test images (transductive), then fine-tune back."""
    # three SSL algorithms; LeJEPA (4 views: twice an ingredient's cost) left out of the small
    # profile's robustness arm to fit the 8-minute budget (v4); the paper profile keeps it
    ingredients: list[str] = ["mae_lr1", "moco_t0p1", "mmcr_global"]
    steps: int = 600                     # as many as the clean control's ingredients get


class FineTune(Section):
    # 'stock' = stock -> FT baseline; recipe names = FT of that SSL ingredient;
    # 'selfsoup_clean' / 'selfsoup_shift' = FT of the uniform soup of the robustness recipes
    # inter-trained on the clean train + val images (control) / on the corrupted test images.
    models: list[str] = ["stock", "mae_lr1", "mae_lr2", "moco_t0p1", "moco_t1", "mmcr_global",
                         "lejepa", "selfsoup_clean", "selfsoup_shift"]
    # grid, chosen per model on validation accuracy. Small profile (v5): LP-FT, a linear probe of
    # the model's own features, then 15 epochs (60 steps) at 1e-3, the same for every model: the
    # largest lr whose fine-tuning noise (two FTs of the stock differing in batch order: 0.013-
    # 0.016 relative distance) stays below the smallest SSL move (0.023-0.025, MAE lr1), so that
    # fine-tuning is the small step next to inter-training, as in the paper (dev seeds 100-102,
    # CLAIMS.md "Calibration v5"). v4: stock probe head, 2e-3 x 60 epochs (converged; it erased
    # where each ingredient started: noise 0.069)
    lrs: list[float] = [1e-3]
    epochs: int = 15
    # v7: every model (stock and ingredients alike) is fine-tuned under this many batch orders;
    # the lr choice and premise P4 use the mean val accuracy over them (one order moves val by up
    # to +-5 points on 500 images), soups and evaluation keep order 0's model. 1 = v5
    orders: int = 3                      # v9 (small profile); 1 = v5
    # LP-FT: head = logistic-regression probe of the model's own frozen features (inverse L2
    # strength probe_c, as stock.probe_c), then the full fine-tune; False (paper): the stock's probe
    probe: bool = True
    probe_c: float = 1.0
    batch: int = 64
    weight_decay: float = 0.01
    warmup_frac: float = 0.1
    augment: Augment = Augment()


class Season(Section):
    """Self-seasoning: softmax mixing weights over {stock} + SSL ingredients, no labels."""
    epochs: int = 30
    batch: int = 256
    lr: float = 0.1
    lr_min: float = 0.01
    k: int = 16
    temperature: float = 0.07
    knn_k: int = 20
    knn_temperature: float = 0.07


class Criteria(Section):
    """Thresholds of the pass_* summary flags; CLAIMS.md's front matter (which also holds the
    premise thresholds) is what the scorecard judges."""
    soup_over_mean: float = 1.0          # (a) soup >= mean ingredient + this (points)
    soup_vs_best: float = -0.5           # (a) soup >= best ingredient + this (points)
    soup_vs_best_ratio: float = 0.9      # (b) soup >= ratio * best ingredient
    robust_gain: float = 2.0             # (c) corrupted-acc gain over the clean self-soup (points)
    robust_clean_drop: float = 1.0       # (c) max clean-acc drop against it (points)


class SelfsoupConfig(MethodConfig):
    seeds: list[int] = [15, 16, 17]  # fresh for v10 (0-2: v2, 3-5: v3, 6-8: v4, 9-11: v5, 12-14: v9; 100-108: dev seeds)
    data: Data = Data()
    model: Model = Model()
    stock: Stock = Stock()
    inter_train: InterTrain = InterTrain()
    robustness: Robustness = Robustness()
    finetune: FineTune = FineTune()
    season: Season = Season()
    criteria: Criteria = Criteria()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"severities": [1, 5]},
        "stock": {"steps": 60},
        "inter_train": {"ingredients": ["mae_lr1", "moco_t0p1"], "steps": 20},
        "robustness": {"ingredients": ["mae_lr1", "moco_t0p1"], "steps": 20},
        "finetune": {"models": ["stock", "mae_lr1", "moco_t0p1", "selfsoup_clean", "selfsoup_shift"],
                     "lrs": [1e-3], "epochs": 2, "orders": 2},
        "season": {"epochs": 2},
    }
    PAPER: ClassVar[dict] = {
        # mini-VTAB (1K labelled train images per task: 800 train + 200 val here) with the task's
        # corruptions in ImageNet-C's folder layout; ImageNet + ImageNet-C by --set (CLAIMS.md)
        "data": {"source": "minivtab", "task": "cifar100", "image_size": 224, "n_train": 800, "n_val": 200,
                 "max_test": 2000, "corruptions": IMAGENET_C, "severities": [1, 2, 3, 4, 5],
                 "shift_corruptions": ["gaussian_noise", "defocus_blur", "contrast", "pixelate"],
                 "shift_severity": 3},
        # architecture and weights from stock.checkpoint (MAE ViT-B/16); no stock pre-training here
        "model": {"num_classes": 100, "device": "auto"},
        "stock": {"steps": 0},
        # official grid: MAE FT-ingredients lr {1..4}e-5, seasoning ingredients all 4e-5; the
        # official "3aug" crop scale (0.08, 1) without our small-profile rotation / pixel noise
        "inter_train": {"steps": 10_000, "batch": 128, "head_lr": 4e-5, "ingredients": ALL_INGREDIENTS,
                        "augment": {"crop_scale": (0.08, 1.0), "rotation_deg": 0.0, "noise_std": 0.0},
                        "recipes": {
            "mae_lr1": {"algo": "mae", "lr": 1e-5}, "mae_lr2": {"algo": "mae", "lr": 4e-5},
            "moco_t0p1": {"algo": "moco", "lr": 4e-5, "temperature": 0.1},
            "moco_t1": {"algo": "moco", "lr": 4e-5, "temperature": 1.0},
            "mmcr_global": {"algo": "mmcr", "lr": 4e-5}, "mmcr_local": {"algo": "mmcr", "lr": 4e-5, "local": True},
            "lejepa": {"algo": "lejepa", "lr": 4e-5, "num_slices": 256}}},
        "robustness": {"steps": 10_000, "ingredients": ["mae_lr1", "moco_t0p1", "mmcr_global", "lejepa"]},
        "finetune": {"models": ["stock", *ALL_INGREDIENTS, "selfsoup_clean", "selfsoup_shift"],
                     "lrs": [1e-5, 2e-5, 3e-5, 4e-5], "epochs": 100, "batch": 128, "probe": False, "orders": 1,
                     "augment": {"crop_scale": (0.08, 1.0), "rotation_deg": 0.0, "noise_std": 0.0}},
        "season": {"epochs": 100},
    }

    @model_validator(mode="after")
    def _names_are_known(self) -> "SelfsoupConfig":
        recipes = self.inter_train.recipes
        for name in self.inter_train.ingredients + self.robustness.ingredients:
            if name not in recipes:
                raise ValueError(f"ingredient {name!r} has no entry in inter_train.recipes")
        missing = set(self.robustness.ingredients) - set(self.inter_train.ingredients)
        if missing:
            # the non-transductive control soups the same recipes inter-trained on clean data
            raise ValueError(f"robustness.ingredients {sorted(missing)} must also be in inter_train.ingredients")
        allowed = {"stock", "selfsoup_clean", "selfsoup_shift", *self.inter_train.ingredients}
        unknown = [m for m in self.finetune.models if m not in allowed]
        if unknown:
            raise ValueError(f"finetune.models {unknown} are not stock, selfsoup_* or an inter_train ingredient")
        if self.finetune.orders < 1:
            raise ValueError(f"finetune.orders = {self.finetune.orders} must be >= 1 (1 = one batch order, v5)")
        if self.finetune.probe and self.finetune.probe_c != self.stock.probe_c:
            # under LP-FT the stock's own probe *is* its head_init (stock.probe_c), reused by fine_tune
            raise ValueError(f"finetune.probe_c = {self.finetune.probe_c} must equal stock.probe_c = "
                             f"{self.stock.probe_c} under LP-FT (the stock's probe is its head_init)")
        for name, r in self.inter_train.recipes.items():
            if r.algo != "mae" and (r.norm_pix or r.fresh_decoder or not r.augment):
                raise ValueError(f"inter_train.recipes.{name}: norm_pix / fresh_decoder / augment are MAE knobs")
        return self

    def preflight(self) -> None:
        """Paper paths and layouts, checked before anything runs (one line naming the key)."""
        from components.selfsoup import paper_data

        d, s = self.data, self.stock
        if d.source == "digits":
            if s.checkpoint:  # a ViT-MAE stock for the digits: 1 channel at data.image_size
                paper_data.check_stock(s, d.image_size, channels=1)
            return
        if d.source == "minivtab" and not d.task:
            raise ValueError("data.task is not set; set it to a mini-VTAB task folder under data.root (e.g. cifar100)")
        n_classes = paper_data.check_clean(d)
        sets = [f"{c}_{v}" for c in d.corruptions for v in d.severities]
        paper_data.check_corrupted(d, sets + [f"{c}_{d.shift_severity}" for c in d.shift_corruptions])
        paper_data.check_stock(s, d.image_size, channels=3)
        if s.steps:
            raise ValueError(f"stock.steps = {s.steps}: the paper profile has no stock pre-training pool; "
                             "the stock is stock.checkpoint as it is (set stock.steps=0)")
        if n_classes != self.model.num_classes:
            raise ValueError(f"data.root has {n_classes} classes but model.num_classes = {self.model.num_classes}; "
                             f"set model.num_classes={n_classes}")
