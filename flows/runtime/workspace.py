"""One ``repro run`` per workspace at a time.

Two runs in one checkout would write each other's params files, commit each other's outputs
under the wrong params and share temp folders. The lock is an ``flock`` on
``.dvc/tmp/repro-run.lock`` (git-ignored by DVC): the kernel releases it when its holder ends,
however it ends, so there is never a stale lock to clean up. The file names the holder (pid,
methods, start time) for the message the second run prints while it waits, or fails with under
``--no-wait``.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import os
from contextlib import contextmanager
from typing import Iterator

from flows.runtime.project import Project


def lock_file(project: Project):
    return project.root / ".dvc" / "tmp" / "repro-run.lock"


@contextmanager
def locked(project: Project, methods: list[str], wait: bool = True,
           say=print) -> Iterator[None]:
    path = lock_file(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() or "another repro run"
            if not wait:
                raise SystemExit(f"[repro] this workspace is busy: {holder}; nothing was run "
                                 "(without --no-wait, repro run waits for it)") from None
            say(f"[repro] waiting: {holder} holds this workspace (one repro run at a time)")
            fcntl.flock(fd, fcntl.LOCK_EX)
        started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"repro run {' '.join(methods)} (pid {os.getpid()}, started {started})\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
