"""Preflight checks for paper profiles: a missing or malformed path fails before anything
runs, in one line that names the config key and the layout expected there.

``PreflightError`` subclasses ``FileNotFoundError`` so existing callers that catch that keep
working; the CLI prints its message alone (no traceback).
"""
from __future__ import annotations

import glob
from pathlib import Path

from components.common.hf_models import CheckpointError, check_checkpoint, check_tokenizer


class PreflightError(FileNotFoundError):
    def __init__(self, key: str, value: str, layout: str, problem: str = "does not exist"):
        self.key, self.value, self.layout = key, value, layout
        super().__init__(f"{key} = {value!r} {problem}; set {key} to {layout} (nothing is downloaded)")

    def __str__(self) -> str:   # FileNotFoundError would otherwise prefix an errno
        return self.args[0]


def require_file(key: str, value: str, layout: str) -> Path:
    path = Path(value).expanduser() if value else None
    if path is None or not path.is_file():
        raise PreflightError(key, value, layout, "is not set" if not value else "is not a file")
    return path


def require_dir(key: str, value: str, layout: str, patterns: tuple[str, ...] = ()) -> Path:
    """A folder that exists and, for each glob in ``patterns``, holds at least one match."""
    path = Path(value).expanduser() if value else None
    if path is None or not path.is_dir():
        raise PreflightError(key, value, layout, "is not set" if not value else "is not a folder")
    for pattern in patterns:
        if not glob.glob(str(path / pattern), recursive=True):
            raise PreflightError(key, value, layout, f"has no file matching {pattern!r}")
    return path


def require_checkpoint(key: str, value: str, what: str = "a save_pretrained model folder") -> Path:
    return _require_valid(key, value, what, check_checkpoint, "a checkpoint")


def require_tokenizer(key: str, value: str, what: str = "a tokenizer folder (save_pretrained: tokenizer.json)") -> Path:
    return _require_valid(key, value, what, check_tokenizer, "a tokenizer folder")


def _require_valid(key: str, value: str, what: str, check, noun: str) -> Path:
    """A folder that exists and passes ``check`` (which raises CheckpointError naming the file)."""
    path = require_dir(key, value, what)
    try:
        check(path)
    except CheckpointError as err:
        raise PreflightError(key, value, what, f"is not {noun} ({_tail(err)})") from None
    return path


def _tail(err: Exception) -> str:
    return str(err).split(": ", 1)[-1]
