"""Dataset readers for published on-disk layouts, through fsspec (local paths or ``s3://``).

Every reader validates what it reads and fails with ``DatasetError`` naming the file (and the
line, field or key) that is wrong, so a user who points ``paper.*`` at the wrong folder learns
what to fix without reading a traceback.

- JSON lines (``.jsonl``/``.json``, optionally ``.gz``): ``read_jsonl`` with a field schema.
- parquet: ``read_parquet`` with required columns.
- image folders: ``image_folder`` for ``root/<class>/<img>`` and ``root/<domain>/<class>/<img>``
  (ImageFolder / DomainBed layouts); ``load_image`` to a float tensor in plain torch + PIL.
- npz: ``read_npz`` with required keys.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Iterator

import fsspec
import numpy as np

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
# JSON types a schema may name: a field's value must be an instance of the given Python type(s)
Schema = dict[str, type | tuple[type, ...]]


class DatasetError(ValueError):
    """A dataset file that does not have the expected layout; the message names file and field."""


def _fs(path: str):
    from fsspec.core import url_to_fs

    return url_to_fs(str(path))


def expand(paths: str | list[str]) -> list[str]:
    """Files named by a path, a glob or a list of them (sorted; a missing one is an error)."""
    out: list[str] = []
    for pattern in [paths] if isinstance(paths, str) else paths:
        fs, root = _fs(pattern)
        found = sorted(fs.glob(root)) if any(c in root for c in "*?[") else ([root] if fs.exists(root) else [])
        if not found:
            raise DatasetError(f"{pattern}: no such file")
        out += [fs.unstrip_protocol(f) if "://" in str(pattern) else f for f in found]
    return out


def _check_fields(record: Any, schema: Schema, where: str) -> None:
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for name, kind in schema.items():
        if name not in record:
            raise DatasetError(f"{where}: missing field {name!r}")
        if not isinstance(record[name], kind):
            want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise DatasetError(f"{where}: field {name!r} must be {want}, got {type(record[name]).__name__}")


def iter_jsonl(paths: str | list[str], schema: Schema | None = None) -> Iterator[dict[str, Any]]:
    """Records of JSON-lines files (gzip by extension), validated against ``schema``."""
    for path in expand(paths):
        with fsspec.open(path, "rt", compression="infer", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise DatasetError(f"{where}: not valid JSON ({err.msg})") from None
                if schema:
                    _check_fields(record, schema, where)
                yield record


def read_jsonl(paths: str | list[str], schema: Schema | None = None, limit: int | None = None
               ) -> list[dict[str, Any]]:
    out = []
    for record in iter_jsonl(paths, schema):
        if limit is not None and len(out) >= limit:
            break
        out.append(record)
    return out


def read_parquet(path: str, columns: dict[str, str] | list[str] | None = None):
    """A pyarrow Table; ``columns`` names required columns, optionally with an arrow type
    family (``"string"``, ``"integer"``, ``"floating"``, ``"list"``) each must have."""
    import pyarrow.parquet as pq
    import pyarrow.types as pat

    with fsspec.open(path, "rb") as f:
        try:
            table = pq.read_table(f)
        except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise DatasetError(f"{path}: not a parquet file ({err})") from None
    wanted = dict.fromkeys(columns) if isinstance(columns, list) else dict(columns or {})
    checks = {"string": lambda t: pat.is_string(t) or pat.is_large_string(t), "integer": pat.is_integer,
              "floating": pat.is_floating, "list": lambda t: pat.is_list(t) or pat.is_large_list(t)}
    for name, family in wanted.items():
        if name not in table.column_names:
            raise DatasetError(f"{path}: missing column {name!r} (has {', '.join(table.column_names)})")
        if family and not checks[family](table.schema.field(name).type):
            raise DatasetError(f"{path}: column {name!r} must be {family}, got {table.schema.field(name).type}")
    return table


def read_npz(path: str, keys: dict[str, int | None] | list[str] | None = None) -> dict[str, np.ndarray]:
    """Arrays of an ``.npz``; ``keys`` names required arrays, optionally with their ndim."""
    with fsspec.open(path, "rb") as f:
        try:
            data = np.load(io.BytesIO(f.read()), allow_pickle=False)
        except Exception as err:  # noqa: BLE001
            raise DatasetError(f"{path}: not an npz file ({err})") from None
        arrays = {k: data[k] for k in data.files}
    wanted = dict.fromkeys(keys) if isinstance(keys, list) else dict(keys or {})
    for name, ndim in wanted.items():
        if name not in arrays:
            raise DatasetError(f"{path}: missing array {name!r} (has {', '.join(arrays) or 'none'})")
        if ndim is not None and arrays[name].ndim != ndim:
            raise DatasetError(f"{path}: array {name!r} must have {ndim} dims, got shape {arrays[name].shape}")
    return arrays


@dataclass(frozen=True)
class ImageRecord:
    path: str
    label: int
    class_name: str
    domain: str = ""


def image_folder(root: str, layout: str = "class", extensions: tuple[str, ...] = IMAGE_EXTENSIONS
                 ) -> tuple[list[ImageRecord], list[str]]:
    """``layout="class"``: ``root/<class>/<image>``; ``"domain/class"``: ``root/<domain>/<class>/<image>``
    (labels shared across domains). Returns the records (sorted) and the class names (label order)."""
    fs, base = _fs(root)
    if not fs.isdir(base):
        raise DatasetError(f"{root}: not a folder (expected {layout.replace('class', '<class>').replace('domain', '<domain>')}/<image>)")
    depth = {"class": 2, "domain/class": 3}.get(layout)
    if depth is None:
        raise ValueError(f"image layout must be 'class' or 'domain/class', got {layout!r}")
    found = []
    for path in sorted(fs.find(base)):
        rel = PurePosixPath(path).relative_to(PurePosixPath(base)).parts
        if PurePosixPath(path).suffix.lower() in extensions:
            if len(rel) != depth:
                raise DatasetError(f"{path}: image at the wrong depth for layout {layout!r} "
                                   f"(expected {'/'.join(['<domain>', '<class>'][-(depth - 1):])}/<image>)")
            found.append(rel)
    if not found:
        raise DatasetError(f"{root}: no images ({', '.join(extensions)}) in layout {layout!r}")
    classes = sorted({parts[-2] for parts in found})
    index = {c: i for i, c in enumerate(classes)}
    records = [ImageRecord(path=fs.unstrip_protocol(f"{base}/{'/'.join(parts)}") if "://" in root
                           else f"{base}/{'/'.join(parts)}",
                           label=index[parts[-2]], class_name=parts[-2],
                           domain=parts[0] if depth == 3 else "") for parts in found]
    if depth == 3:
        for domain in sorted({r.domain for r in records}):
            missing = set(classes) - {r.class_name for r in records if r.domain == domain}
            if missing:
                raise DatasetError(f"{root}/{domain}: missing class folder(s) {sorted(missing)}")
    return records, classes


def load_image(path: str, size: int | tuple[int, int] | None = None, mean: tuple[float, ...] | None = None,
               std: tuple[float, ...] | None = None):
    """An RGB image as a float tensor (3, H, W) in [0, 1], resized (bicubic, PIL) and normalised
    if asked: the pre-processing of CLIP/ViT/ResNet processors without torchvision."""
    import torch
    from PIL import Image

    with fsspec.open(path, "rb") as f:
        try:
            image = Image.open(io.BytesIO(f.read())).convert("RGB")
        except Exception as err:  # noqa: BLE001
            raise DatasetError(f"{path}: not a readable image ({err})") from None
    if size is not None:
        image = image.resize((size, size) if isinstance(size, int) else size[::-1], Image.BICUBIC)
    tensor = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1).contiguous()
    if mean is not None and std is not None:
        tensor = (tensor - torch.tensor(mean).view(-1, 1, 1)) / torch.tensor(std).view(-1, 1, 1)
    return tensor
