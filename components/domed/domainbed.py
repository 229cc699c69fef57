"""The paper profile's data and backbone: DomainBed datasets from a local root and a transformers
ResNet, behind the same ``Split`` / ``make_model`` interfaces the digit benchmarks use.

- Layout: ``<root>/<dataset>/<domain>/<class>/<image>`` (as DomainBed's download script leaves
  PACS, VLCS, OfficeHome, TerraIncognita and DomainNet). Domains and classes are sorted by
  folder name, which is DomainBed's environment order, so ``test_env`` i is DomainBed's i.
- ``build_domains`` only indexes the files (path, label, domain, in/out split): DomainNet's
  586k images do not fit in a table of pixels. ``ImageFiles`` decodes the rows a batch asks for,
  with DomainBed's pre-processing: bilinear resize to ``size`` x ``size`` and ImageNet
  normalisation; training batches also get its augmentation (random resized crop of 70-100 % of
  the area, a horizontal flip, brightness/contrast/saturation/hue jitter of 0.3 in a random
  order, and 10 % greyscale), written in PIL the way torchvision's PIL backend does it.
- ``ResNetClassifier``: ``ResNetModel`` from a local ``save_pretrained`` folder plus a linear
  head, BatchNorm statistics frozen during training (DomainBed's ``freeze_bn``).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch import nn

from components.common.preflight import PreflightError, require_checkpoint, require_dir
from components.common.readers import image_folder

DATASETS = ("PACS", "VLCS", "OfficeHome", "TerraIncognita", "DomainNet")
LAYOUT = "a DomainBed root holding <dataset>/<domain>/<class>/<image> for each of data.benchmarks"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_SCALE, CROP_RATIO, JITTER, GREY_P = (0.7, 1.0), (3 / 4, 4 / 3), 0.3, 0.1


def domain_folders(root: str, dataset: str) -> list[str]:
    """Sorted domain folder names of one dataset (no walk over the images: cheap on DomainNet)."""
    folder = Path(root).expanduser() / dataset
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def check_root(root: str, datasets: list[str], test_envs: list[int]) -> None:
    """Preflight: every dataset is a folder of >= 2 domain folders, each with class folders, and
    has at least one of the requested test domains."""
    require_dir("data.domainbed_root", root, LAYOUT)
    for dataset in datasets:
        domains = domain_folders(root, dataset)
        if len(domains) < 2:
            raise PreflightError("data.domainbed_root", root, LAYOUT,
                                 f"has {len(domains)} domain folder(s) under {dataset}/ (needs >= 2)")
        if not any(0 <= e < len(domains) for e in test_envs):
            raise PreflightError("data.test_envs", str(test_envs), f"indices of {dataset}'s {len(domains)} domains",
                                 f"names no domain of {dataset}")
        for domain in domains:
            if not any(p.is_dir() for p in (Path(root).expanduser() / dataset / domain).iterdir()):
                raise PreflightError("data.domainbed_root", root, LAYOUT,
                                     f"has no class folders under {dataset}/{domain}/")


def check_backbone(path: str) -> None:
    from components.common.hf_models import read_config

    key = "model.backbone_path"
    folder = require_checkpoint(key, path, "a save_pretrained transformers ResNet folder (e.g. microsoft/resnet-50)")
    if read_config(folder).get("model_type") != "resnet":
        raise PreflightError(key, path, "a save_pretrained transformers ResNet folder",
                             f"is a {read_config(folder).get('model_type')!r} checkpoint, not 'resnet'")


def index_dataset(root: str, dataset: str, holdout_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """One row per image: ``path``, ``y``, ``domain`` (index of the sorted domain folders),
    ``is_out`` (DomainBed's held-out fraction of every domain) and ``shortcut`` (-1: none)."""
    records, classes = image_folder(str(Path(root).expanduser() / dataset), layout="domain/class")
    domains = sorted({r.domain for r in records})
    domain = np.array([domains.index(r.domain) for r in records], dtype=np.int64)
    rng = np.random.default_rng(seed)
    is_out = np.zeros(len(records), dtype=bool)
    for d in range(len(domains)):
        rows = np.flatnonzero(domain == d)
        is_out[rows[rng.permutation(len(rows))[: int(round(holdout_fraction * len(rows)))]]] = True
    return {"path": np.array([r.path for r in records]), "y": np.array([r.label for r in records], dtype=np.int64),
            "domain": domain, "is_out": is_out, "shortcut": np.full(len(records), -1, dtype=np.int64),
            "domains": np.array(domains), "classes": np.array(classes)}


class ImageFiles:
    """Image files that index like the in-memory ``x`` of a digit split: ``files[rows]`` is a
    float tensor [n, 3, size, size]. ``augmented(seed)`` gives a copy whose batches are
    augmented, each image from its own seeded generator (same seed, same batches, any threads)."""

    def __init__(self, paths: np.ndarray, size: int, threads: int = 4, augment_seed: int | None = None):
        self.paths, self.size, self.threads = np.asarray(paths), int(size), max(1, int(threads))
        self.augment_seed, self._batches = augment_seed, 0
        self.shape = (len(self.paths), 3, self.size, self.size)

    def __len__(self) -> int:
        return len(self.paths)

    def subset(self, index: np.ndarray) -> "ImageFiles":
        return ImageFiles(self.paths[index], self.size, self.threads, self.augment_seed)

    def augmented(self, seed: int) -> "ImageFiles":
        return ImageFiles(self.paths, self.size, self.threads, seed)

    def __getitem__(self, rows) -> torch.Tensor:
        paths = self.paths[rows] if isinstance(rows, slice) else self.paths[np.asarray(rows).reshape(-1)]
        if self.augment_seed is None:
            load = lambda i: plain_image(str(paths[i]), self.size)  # noqa: E731
        else:
            batch_seed = (self.augment_seed, self._batches)
            self._batches += 1
            load = lambda i: augmented_image(str(paths[i]), self.size, np.random.default_rng((*batch_seed, i)))  # noqa: E731
        if self.threads == 1 or len(paths) == 1:
            return torch.stack([load(i) for i in range(len(paths))])
        with ThreadPoolExecutor(self.threads) as pool:   # PIL decodes outside the GIL
            return torch.stack(list(pool.map(load, range(len(paths)))))


def _open_rgb(path: str):
    from PIL import Image

    return Image.open(path).convert("RGB")


def plain_image(path: str, size: int) -> torch.Tensor:
    """DomainBed's evaluation transform: bilinear resize to size x size (torchvision's
    ``Resize`` default), ImageNet normalisation."""
    from PIL import Image

    return _normalise(_open_rgb(path).resize((size, size), Image.BILINEAR))


def augmented_image(path: str, size: int, rng: np.random.Generator) -> torch.Tensor:
    """DomainBed's training transform, in PIL + torch."""
    from PIL import ImageOps

    image = _random_resized_crop(_open_rgb(path), size, rng)
    if rng.random() < 0.5:
        image = ImageOps.mirror(image)
    image = color_jitter(image, rng)
    if rng.random() < GREY_P:
        image = ImageOps.grayscale(image).convert("RGB")
    return _normalise(image)


def color_jitter(image, rng: np.random.Generator):
    """torchvision's ``ColorJitter(0.3, 0.3, 0.3, 0.3)``: brightness, contrast and saturation
    factors in [0.7, 1.3] and a hue shift in [-0.3, 0.3], applied in a random order."""
    from PIL import ImageEnhance

    factors = [rng.uniform(1 - JITTER, 1 + JITTER) for _ in range(3)] + [rng.uniform(-JITTER, JITTER)]
    enhancers = (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)
    for op in rng.permutation(4):
        image = adjust_hue(image, factors[3]) if op == 3 else enhancers[op](image).enhance(factors[op])
    return image


def adjust_hue(image, shift: float):
    """Rotate the hue channel by ``shift`` of a full turn (as torchvision's PIL ``adjust_hue``:
    HSV, uint8 hue moved by int(shift * 255) with wrap-around, back to RGB)."""
    from PIL import Image

    h, s, v = image.convert("HSV").split()
    hue = (np.asarray(h, dtype=np.int16) + int(shift * 255)) % 256
    return Image.merge("HSV", (Image.fromarray(hue.astype(np.uint8), "L"), s, v)).convert("RGB")


def _random_resized_crop(image, size: int, rng: np.random.Generator):
    from PIL import Image

    width, height = image.size
    for _ in range(10):     # torchvision's rejection sampling, then the whole image
        area = width * height * rng.uniform(*CROP_SCALE)
        ratio = np.exp(rng.uniform(np.log(CROP_RATIO[0]), np.log(CROP_RATIO[1])))
        w, h = int(round(np.sqrt(area * ratio))), int(round(np.sqrt(area / ratio)))
        if 0 < w <= width and 0 < h <= height:
            left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            return image.resize((size, size), Image.BILINEAR, box=(left, top, left + w, top + h))
    return image.resize((size, size), Image.BILINEAR)


def _normalise(image) -> torch.Tensor:
    pixels = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
    return (pixels - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(IMAGENET_STD).view(3, 1, 1)


class ResNetClassifier(nn.Module):
    """transformers ``ResNetModel`` (pooled features) + a linear head. Inputs move to the
    backbone's device; logits come back as float32 on the CPU, where the losses, teacher logits
    and masks live, so the training code is the same as for the CPU-only digit CNN."""

    def __init__(self, folder: str, n_classes: int, device: str = "auto"):
        super().__init__()
        from components.common.hf_models import load_model

        # fp32 weights, as DomainBed trains (bf16 weights under Adam at lr 5e-5 lose the updates)
        self.backbone = load_model(folder, "encoder", device=device, dtype="float32")
        if type(self.backbone).__name__ != "ResNetModel":
            raise ValueError(f"{folder}: loads as {type(self.backbone).__name__}, expected ResNetModel")
        ref = next(self.backbone.parameters())
        self.head = nn.Linear(self.backbone.config.hidden_sizes[-1], n_classes).to(ref.device)

    def train(self, mode: bool = True) -> "ResNetClassifier":
        super().train(mode)
        for module in self.backbone.modules():       # DomainBed freezes BatchNorm statistics
            if isinstance(module, nn.BatchNorm2d):
                module.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = self.head.weight.device
        features = self.backbone(pixel_values=x.to(device)).pooler_output.flatten(1)
        return self.head(features).float().cpu()
