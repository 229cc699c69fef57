"""A shared data root on object storage (``REPRO_DATA_ROOT=s3://bucket/data``) through fsspec.

Ray workers on other machines have no view of the driver's workspace. With a data root the
stage outputs live at ``<root>/<method>/<stage>[/<item>]`` (same layout as ``data/``):

- before submitting stages, the driver uploads the inputs they read that this run does not
  produce (outputs that were already up to date or restored from DVC's run-cache);
- a worker downloads its inputs into node-local scratch, runs the stage there, and uploads
  the output folder (old files at that prefix are removed first);
- the driver, when it records the stage, downloads exactly the files the worker listed into a
  temp folder beside the workspace output, renames it into place and ``dvc commit``s it.

DVC still versions the outputs: its outs are workspace paths, and its remote (``dvc-s3``) may
sit on the same store. A worker killed mid-upload leaves a partial prefix that nothing has
recorded; the stage is stale for DVC, and its next run replaces the prefix.
"""
from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Iterable

TMP_PREFIX = ".tmp-"


class DataRoot:
    def __init__(self, url: str):
        from fsspec.core import url_to_fs

        self.url = url.rstrip("/")
        self.fs, self.base = url_to_fs(self.url)
        self.base = self.base.rstrip("/")

    def path(self, method: str, stage: str, item_key: str | None = None) -> str:
        parts = [self.base, method, stage] + ([item_key] if item_key else [])
        return "/".join(parts)

    def uri(self, method: str, stage: str, item_key: str | None = None) -> str:
        return self.fs.unstrip_protocol(self.path(method, stage, item_key))

    def upload_dir(self, local: Path, remote: str) -> list[str]:
        """Replace ``remote`` with the files of ``local``; returns their relative paths."""
        self.remove(remote)
        files = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
        for rel in files:
            self.fs.put_file(str(local / rel), f"{remote}/{rel}")
        return files

    def remove(self, remote: str) -> None:
        if self.fs.exists(remote):
            self.fs.rm(remote, recursive=True)
        self.fs.invalidate_cache(remote)

    def list_files(self, remote: str) -> list[str]:
        self.fs.invalidate_cache(remote)
        if not self.fs.exists(remote):
            return []
        return sorted(p[len(remote) + 1:] for p in self.fs.find(remote))

    def download_dir(self, remote: str, local: Path, files: Iterable[str] | None = None) -> None:
        """Fetch ``files`` (default: everything under ``remote``) into ``local``."""
        names = list(files) if files is not None else self.list_files(remote)
        local.mkdir(parents=True, exist_ok=True)
        for rel in names:
            target = local / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(f"{remote}/{rel}", str(target))

    def fetch_into_place(self, remote: str, final: Path, files: Iterable[str]) -> None:
        """Download into a temp folder next to ``final``, then swap it in: a crash midway
        leaves only a ``.tmp-`` folder, never a half-filled output."""
        from flows.runtime.execute import replace_dir

        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f"{TMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}")
        try:
            self.download_dir(remote, tmp, files)
            replace_dir(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
