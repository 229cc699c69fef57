"""The paper's data from local folders in their published layouts (nothing is downloaded).

- ``minivtab``: a snapshot of the Hugging Face dataset antofuller/mini-VTAB, one folder per task
  with parquet shards ``<root>/<task>/train-*.parquet`` and ``<root>/<task>/test-*.parquet``
  (or ``<task>/<split>/*.parquet``); columns ``image`` (struct with encoded ``bytes``) and
  ``label`` (int). The official code reads exactly these two columns.
- ``imagefolder``: ImageNet's layout ``<root>/train/<class>/<image>`` and ``<root>/val/<class>/<image>``.
- corruptions: ImageNet-C's layout ``<corrupted_root>/<corruption>/<severity>/<class>/<image>``,
  class folders named as the clean classes (ImageNet wnids; for mini-VTAB the integer label).

Images are kept as uint8 (N, 3, S, S) tensors to fit the corrupted sets in memory; stages turn
them into [0, 1] floats batch by batch (``data.as_float``). Labelled train and val both come
from the task's train split (val for model selection; the official code selects on test).
"""
from __future__ import annotations

import glob
import io
import os
from pathlib import Path

import numpy as np
import torch

from components.common.hf_models import read_config
from components.common.preflight import PreflightError, require_checkpoint, require_dir
from components.common.readers import DatasetError, image_folder, read_parquet

MINIVTAB_LAYOUT = ("a mini-VTAB snapshot folder: <root>/<task>/train-*.parquet and <root>/<task>/test-*.parquet "
                   "(columns image, label), task from data.task")
IMAGEFOLDER_LAYOUT = "an ImageNet-layout folder: <root>/train/<class>/<image> and <root>/val/<class>/<image>"
CORRUPTED_LAYOUT = "an ImageNet-C-layout folder: <root>/<corruption>/<severity>/<class>/<image>"
CLEAN_SPLITS = {"minivtab": ("train", "test"), "imagefolder": ("train", "val")}


def parquet_shards(root: str, task: str, split: str) -> list[str]:
    base = Path(root).expanduser() / task
    return sorted(glob.glob(str(base / f"{split}-*.parquet")) + glob.glob(str(base / split / "*.parquet")))


def decode(data: bytes, size: int) -> np.ndarray:
    """Encoded image bytes -> (3, size, size) uint8. Square images are resized (bicubic); others
    are resized on the short side to size * 256 / 224 and centre-cropped (ImageNet-C's crop)."""
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = image.size
    if w != h:
        scale = size * 256 / 224 / min(w, h)
        image = image.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.BICUBIC)
        w, h = image.size
        left, top = (w - size) // 2, (h - size) // 2
        image = image.crop((left, top, left + size, top + size))
    elif w != size:
        image = image.resize((size, size), Image.BICUBIC)
    return np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)


def stack(arrays: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(arrays)) if arrays else torch.zeros(0, 3, 1, 1, dtype=torch.uint8)


class Source:
    """A clean split as a list of (load-bytes, label) items; decoding happens only for the
    items a split keeps (ImageNet's train split is never decoded as a whole)."""

    def __init__(self, loaders: list, labels: list[int], classes: list[str]):
        self.loaders, self.labels, self.classes = loaders, labels, classes

    def take(self, idx: np.ndarray, size: int) -> dict[str, torch.Tensor]:
        return {"x": stack([decode(self.loaders[i](), size) for i in idx]),
                "y": torch.tensor([self.labels[i] for i in idx], dtype=torch.int64)}


def minivtab_split(root: str, task: str, split: str) -> Source:
    shards = parquet_shards(root, task, split)
    if not shards:
        raise DatasetError(f"{root}/{task}: no {split}-*.parquet shard (expected {MINIVTAB_LAYOUT})")
    loaders, labels = [], []
    for shard in shards:
        table = read_parquet(shard, {"image": None, "label": "integer"})
        for image, label in zip(table.column("image").to_pylist(), table.column("label").to_pylist()):
            data = image["bytes"] if isinstance(image, dict) else image
            if not isinstance(data, bytes):
                raise DatasetError(f"{shard}: column 'image' must hold encoded image bytes")
            loaders.append(lambda data=data: data)
            labels.append(int(label))
    classes = [str(c) for c in range(max(labels) + 1)]
    return Source(loaders, labels, classes)


def folder_split(root: str, split: str, classes: list[str] | None = None) -> Source:
    records, found = image_folder(str(Path(root).expanduser() / split))
    classes = classes or found
    index = {c: i for i, c in enumerate(classes)}
    unknown = sorted(set(found) - set(index))
    if unknown:
        raise DatasetError(f"{root}/{split}: class folder(s) {unknown[:5]} are not classes of the clean data")
    return Source([lambda p=r.path: Path(p).read_bytes() for r in records],
                  [index[r.class_name] for r in records], classes)


def clean_sources(d) -> tuple[Source, Source]:
    train_split, test_split = CLEAN_SPLITS[d.source]
    if d.source == "minivtab":
        train = minivtab_split(d.root, d.task, train_split)
        test = minivtab_split(d.root, d.task, test_split)
        test.classes = train.classes = [str(c) for c in range(max(len(train.classes), len(test.classes)))]
        return train, test
    train = folder_split(d.root, train_split)
    return train, folder_split(d.root, test_split, train.classes)


def subset(n: int, limit: int, seed: int) -> np.ndarray:
    """All of 0..n-1 (limit 0) or a seeded random ``limit`` of them, in ascending order."""
    if not limit or limit >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:limit])


def load_paper_splits(d) -> tuple[dict, list[str]]:
    """train / val (disjoint, from the task's train split) and test, as uint8 tensors."""
    train, test = clean_sources(d)
    if d.n_train + d.n_val > len(train.labels):
        raise DatasetError(f"{d.root}: train split has {len(train.labels)} images, fewer than "
                           f"data.n_train + data.n_val = {d.n_train + d.n_val}")
    perm = np.random.default_rng(d.split_seed).permutation(len(train.labels))
    splits = {"train": train.take(np.sort(perm[:d.n_train]), d.image_size),
              "val": train.take(np.sort(perm[d.n_train:d.n_train + d.n_val]), d.image_size),
              "test": test.take(subset(len(test.labels), d.max_test, d.split_seed), d.image_size)}
    return splits, train.classes


def load_corrupted_sets(d, classes: list[str], names: list[str]) -> dict[str, dict[str, torch.Tensor]]:
    """``{"<corruption>_<severity>": {"x", "y"}}`` for each requested set (each capped at data.max_test)."""
    out = {}
    for name in names:
        corruption, _, severity = name.rpartition("_")
        source = folder_split(str(Path(d.corrupted_root).expanduser() / corruption), severity, classes)
        out[name] = source.take(subset(len(source.labels), d.max_test, d.split_seed), d.image_size)
    return out


# ---- preflight: every path and layout the paper profile reads, checked before anything runs ----

def _has_subfolder(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return any(e.is_dir() for e in entries)


def check_clean(d) -> int:
    """The clean data's layout; returns its number of classes."""
    if d.source == "minivtab":
        require_dir("data.root", d.root, MINIVTAB_LAYOUT)
        labels = []
        for split in CLEAN_SPLITS["minivtab"]:
            shards = parquet_shards(d.root, d.task, split)
            if not shards:
                raise PreflightError("data.root", d.root, MINIVTAB_LAYOUT,
                                     f"has no {d.task}/{split}-*.parquet (data.task = {d.task!r})")
            for shard in shards:
                try:
                    labels += read_parquet(shard, {"image": None, "label": "integer"}).column("label").to_pylist()
                except DatasetError as err:
                    raise PreflightError("data.root", d.root, MINIVTAB_LAYOUT, f"is malformed ({err})") from None
        return max(labels) + 1
    root = require_dir("data.root", d.root, IMAGEFOLDER_LAYOUT)
    for split in CLEAN_SPLITS["imagefolder"]:
        if not (root / split).is_dir() or not _has_subfolder(root / split):
            raise PreflightError("data.root", d.root, IMAGEFOLDER_LAYOUT, f"has no {split}/<class>/ folders")
    return sum(1 for e in os.scandir(root / "train") if e.is_dir())


def check_corrupted(d, names: list[str]) -> None:
    root = require_dir("data.corrupted_root", d.corrupted_root, CORRUPTED_LAYOUT)
    for name in names:
        corruption, _, severity = name.rpartition("_")
        folder = root / corruption / severity
        if not folder.is_dir() or not _has_subfolder(folder):
            raise PreflightError("data.corrupted_root", d.corrupted_root, CORRUPTED_LAYOUT,
                                 f"has no {corruption}/{severity}/<class>/ folders")


def check_stock(stock, image_size: int, channels: int) -> None:
    """stock.checkpoint must be a ViT-MAE save_pretrained folder for these images."""
    key, layout = "stock.checkpoint", "a ViTMAEForPreTraining save_pretrained folder (e.g. facebook/vit-mae-base)"
    path = require_checkpoint(key, stock.checkpoint, layout)
    config = read_config(path)
    if config.get("model_type") != "vit_mae":
        raise PreflightError(key, stock.checkpoint, layout, f"is a {config.get('model_type')!r} model, not vit_mae")
    if config.get("image_size") != image_size or config.get("num_channels", 3) != channels:
        raise PreflightError(key, stock.checkpoint, layout,
                             f"takes {config.get('num_channels', 3)}x{config.get('image_size')} px images but "
                             f"the data are {channels}x{image_size} (data.image_size)")
