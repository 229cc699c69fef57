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
    """Tensors, state dicts and plain containers of them (dict, list, tuple, str, numbers,
    None). Anything else is refused here, when it is written, because ``load_torch`` reads
    with ``weights_only=True`` (it never unpickles code)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    if not _plainly_loadable(obj):
        try:
            _load_weights_only(io.BytesIO(buf.getvalue()), "cpu")
        except Exception as err:  # noqa: BLE001 - the unpickler names what it refused
            raise TypeError(f"save_torch({path}): this object cannot be read back with "
                            f"torch.load(weights_only=True): {' '.join(str(err).split())[:400]}; "
                            "save tensors, state dicts and plain containers (torch.from_numpy, .tolist())") from None
    write_bytes_atomic(path, buf.getvalue())


def _plainly_loadable(obj: Any) -> bool:
    """A quick structural check (no second deserialisation for the common cases)."""
    import torch

    if obj is None or isinstance(obj, (bool, int, float, str, bytes, torch.Tensor, torch.dtype,
                                       torch.device, torch.Size)):
        return True
    if type(obj) in (dict, collections.OrderedDict):
        return all(_plainly_loadable(k) and _plainly_loadable(v) for k, v in obj.items())
    if type(obj) in (list, tuple, set):
        return all(_plainly_loadable(v) for v in obj)
    return False


def load_torch(path: str | os.PathLike, map_location: str = "cpu") -> Any:
    """Read what ``save_torch`` wrote. ``weights_only=True``: a file holding pickled objects
    (which could run code when loaded) is refused."""
    import torch

    return _load_weights_only(io.BytesIO(read_bytes(path)), map_location)


def _load_weights_only(f, map_location: str) -> Any:
    """``torch.load(weights_only=True)``, with numpy arrays of plain dtypes allowed (data, not
    code: the stages save numpy splits and records); object arrays and other classes are refused."""
    import torch

    with torch.serialization.safe_globals(_numpy_safe_globals()):
        return torch.load(f, map_location=map_location, weights_only=True)


def _numpy_safe_globals() -> list:
    import numpy as np
    from numpy._core.multiarray import _reconstruct, scalar

    dtypes = [getattr(np.dtypes, name) for name in dir(np.dtypes)
              if name.endswith("DType") and name != "ObjectDType"]
    return [_reconstruct, scalar, np.ndarray, np.dtype, *dtypes]
