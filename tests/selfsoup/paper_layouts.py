"""Tiny datasets in the selfsoup paper profile's on-disk layouts (generated, never downloaded):
a mini-VTAB task as Hugging Face parquet shards and its corruptions in ImageNet-C's folders."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np


def class_image(rng: np.random.Generator, label: int, size: int) -> np.ndarray:
    """Noise with one class-dependent bright quadrant, so a few steps can learn something."""
    pixels = rng.integers(0, 128, (size, size, 3), dtype=np.uint8)
    half = size // 2
    top, left = (label // 2) % 2 * half, label % 2 * half
    pixels[top:top + half, left:left + half] = 255
    return pixels


def png_bytes(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def write_minivtab(root: Path, task: str = "cifar100", n_classes: int = 4, per_class: dict | None = None,
                   size: int = 32, seed: int = 0) -> Path:
    """``<root>/<task>/<split>-00000-of-00001.parquet`` with ``image`` {bytes, path} and ``label``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    folder = Path(root) / task
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (per_class or {"train": 10, "test": 4}).items():
        labels = [c for c in range(n_classes) for _ in range(n)]
        images = [{"bytes": png_bytes(class_image(rng, c, size)), "path": f"{split}_{i}.png"}
                  for i, c in enumerate(labels)]
        table = pa.table({"image": images, "label": pa.array(labels, pa.int64())})
        pq.write_table(table, folder / f"{split}-00000-of-00001.parquet")
    return Path(root)


def write_imagenet_c(root: Path, corruptions: list[str], severities: list[int], n_classes: int = 4,
                     per_class: int = 3, size: int = 32, seed: int = 1) -> Path:
    """``<root>/<corruption>/<severity>/<class>/<i>.png``, class folders named by label."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for corruption in corruptions:
        for severity in severities:
            for label in range(n_classes):
                folder = Path(root) / corruption / str(severity) / str(label)
                folder.mkdir(parents=True, exist_ok=True)
                for i in range(per_class):
                    pixels = class_image(rng, label, size)
                    noisy = np.clip(pixels + rng.normal(0, 20 * severity, pixels.shape), 0, 255).astype(np.uint8)
                    Image.fromarray(noisy).save(folder / f"{i}.png")
    return Path(root)
