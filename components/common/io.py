"""Reading and writing stage files through fsspec, so a path may be local or ``s3://...``.

Tables are parquet (pyarrow), tensors/state dicts go through ``torch.save``, small records are
JSON. Local writes are atomic (write a temp file, then rename) so a killed process never
leaves a truncated file that looks complete.
"""
from __future__ import annotations

import collections
import functools
import io
import json
import os
import pickle
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


def save_npz(path: str | os.PathLike, **arrays) -> None:
    """Compressed ``.npz`` of named numpy arrays, written atomically (any fsspec path)."""
    import numpy as np

    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())


def load_npz(path: str | os.PathLike) -> dict:
    """Every array of an ``.npz`` file, loaded eagerly into a plain dict."""
    import numpy as np

    with np.load(io.BytesIO(read_bytes(path))) as f:
        return {k: f[k] for k in f.files}


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
    """Tensors, state dicts, numpy arrays of plain dtypes and plain containers of them (dict,
    list, tuple, str, numbers, None). Anything else is refused here, before a byte is written,
    because ``load_torch`` reads with ``weights_only=True`` (it never unpickles code)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    if not _plainly_loadable(obj):
        try:
            _load_weights_only(io.BytesIO(buf.getvalue()), "cpu")
        except pickle.UnpicklingError as err:
            raise TypeError(f"save_torch({path}): cannot be read back with torch.load(weights_only=True): "
                            f"{_refusal(err)}; save tensors, numpy arrays and plain containers "
                            "(turn records into dicts)") from None
    write_bytes_atomic(path, buf.getvalue())


def _plainly_loadable(obj: Any) -> bool:
    """A quick structural check, so the common cases skip a second deserialisation."""
    import torch

    if obj is None or isinstance(obj, (bool, int, float, str, bytes, torch.Tensor, torch.dtype,
                                       torch.device, torch.Size)):
        return True
    if type(obj) in (dict, collections.OrderedDict):
        return all(_plainly_loadable(k) and _plainly_loadable(v) for k, v in obj.items())
    if type(obj) in (list, tuple):
        return all(_plainly_loadable(v) for v in obj)
    return False


def load_torch(path: str | os.PathLike, map_location: str = "cpu") -> Any:
    """Read what ``save_torch`` wrote, with ``weights_only=True``: a file holding pickled objects
    (which could run code when loaded) is refused with one ``UnpicklingError`` naming the file."""
    try:
        return _load_weights_only(io.BytesIO(read_bytes(path)), map_location)
    except pickle.UnpicklingError as err:
        raise pickle.UnpicklingError(f"load_torch({path}): refused, the file holds objects that "
                                     f"weights_only=True does not load: {_refusal(err)}") from None


def _load_weights_only(f, map_location: str) -> Any:
    """``torch.load(weights_only=True)`` with numpy arrays of plain dtypes allowed (data, not
    code); object arrays and every class outside torch's own allow-list are refused."""
    import torch

    _allow_numpy_arrays()
    return torch.load(f, map_location=map_location, weights_only=True)


@functools.cache
def _allow_numpy_arrays() -> None:
    """Add plain numpy arrays to torch's allow-list once per process. Not the ``safe_globals``
    context manager: its exit removes the globals for every thread, so a stage loading in another
    thread at that moment would be refused."""
    import numpy as np
    import torch
    from numpy._core.multiarray import _reconstruct, scalar

    # an object array is rebuilt through ObjectDType: leaving it out refuses object arrays;
    # bytes: numpy pickles an empty array's buffer as bytes()
    dtypes = [getattr(np.dtypes, name) for name in dir(np.dtypes)
              if name.endswith("DType") and name != "ObjectDType"]
    torch.serialization.add_safe_globals([_reconstruct, scalar, np.ndarray, np.dtype, *dtypes, bytes])


def _refusal(err: Exception) -> str:
    """The unpickler's reason in one line (torch wraps it in a long multi-line explanation)."""
    text = str(err)
    reason = text.split("WeightsUnpickler error:", 1)[-1].split("Check the documentation", 1)[0]
    return " ".join(reason.split())[:300]
