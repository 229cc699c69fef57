"""Reading and writing stage files through fsspec, so a path may be local or ``s3://...``.

Tables are parquet (pyarrow), tensors/state dicts go through ``torch.save``, small records are
JSON. Local writes are atomic (write a temp file, then rename) so a killed process never
leaves a truncated file that looks complete.
"""
from __future__ import annotations

import collections
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq


def _is_local(path: str | os.PathLike) -> bool:
    return "://" not in str(path) or str(path).startswith("file://")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    if not _is_local(path):
        with fsspec.open(str(path), "wb") as f:  # object stores commit on close
            f.write(data)
        return
    path = Path(str(path).removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_bytes(path: str | os.PathLike) -> bytes:
    with fsspec.open(str(path), "rb") as f:
        return f.read()


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"
    write_bytes_atomic(path, text.encode())


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(read_bytes(path))


def _json_default(obj: Any) -> Any:
    # numpy scalars/arrays and paths show up in metric dicts all the time
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_table(path: str | os.PathLike, table: pa.Table | dict | Any) -> None:
    """Write a pyarrow Table, a dict of columns, or a pandas DataFrame as parquet."""
    if isinstance(table, dict):
        table = pa.table(table)
    elif not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    write_bytes_atomic(path, buf.getvalue())


def read_table(path: str | os.PathLike) -> pa.Table:
    with fsspec.open(str(path), "rb") as f:
        return pq.read_table(f)


def save_torch(path: str | os.PathLike, obj: Any) -> None:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    write_bytes_atomic(path, buf.getvalue())


def load_torch(path: str | os.PathLike, map_location: str = "cpu") -> Any:
    import torch

    return torch.load(io.BytesIO(read_bytes(path)), map_location=map_location, weights_only=False)
