"""Ctrl-C and SIGTERM for ``repro run``: stop within seconds, keep what finished, resume later.

While a run is in progress, SIGINT and SIGTERM (i) run the registered stop callbacks at once
(kill the local worker processes, so running stages end now instead of the thread pool waiting
for them), and (ii) raise ``Interrupted`` (a ``KeyboardInterrupt``) in the main thread, which
unwinds Prefect's flow, marks the MLflow parent run KILLED and stops ``repro run all`` from
going on to the next method. While the driver records a finished stage (DVC commit, MLflow
child run) the exception waits until the record is complete, so no record is left half-written.
A second signal acts at once.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return signal.Signals(self.signum).name


_lock = threading.RLock()
_stop_callbacks: list[Callable[[], None]] = []
_deferring = 0
_pending: int | None = None
_received = 0
_last_signum: int | None = None
_installed = False


def _handle(signum, frame) -> None:
    global _pending, _received, _last_signum
    _received += 1
    _last_signum = signum
    if _received > 1:
        raise Interrupted(signum)
    with _lock:
        callbacks = list(_stop_callbacks)
    for callback in callbacks:
        try:
            callback()
        except Exception:  # noqa: BLE001 - stopping must go on
            pass
    if _deferring:
        _pending = signum
        return
    raise Interrupted(signum)


@contextmanager
def handled() -> Iterator[None]:
    """Install the handlers for the duration of a run (main thread only; elsewhere a no-op).
    Installed even where SIGINT was inherited as ignored (a command started with ``&`` from a
    script): an interrupt of ``repro run`` must always stop it."""
    global _received, _pending, _installed
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    _received, _pending = 0, None
    for s in SIGNALS:
        signal.signal(s, _handle)
    _installed = True
    try:
        yield
    finally:
        _installed = False
        for s, handler in previous.items():
            signal.signal(s, handler)


def reclaim_sigterm() -> None:
    """Called from inside the Prefect flow: Prefect's flow engine swaps in its own SIGTERM
    handler for the flow's duration. That handler raises ``TerminationSignal`` without running
    the stop callbacks, so the task threads went on waiting for live workers and the driver
    hung. Put ours back (Prefect restores whatever it found when the flow ends: ours again)."""
    if _installed and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handle)


@contextmanager
def on_stop(callback: Callable[[], None]) -> Iterator[None]:
    with _lock:
        _stop_callbacks.append(callback)
    try:
        yield
    finally:
        with _lock:
            _stop_callbacks.remove(callback)


@contextmanager
def deferred() -> Iterator[None]:
    """A signal arriving inside this block is raised when the block ends."""
    global _deferring, _pending
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        _deferring += 1
    try:
        yield
    finally:
        if on_main:
            _deferring -= 1
            if not _deferring and _pending is not None:
                signum, _pending = _pending, None
                raise Interrupted(signum)


def interrupted() -> bool:
    return _received > 0


def raise_if_interrupted() -> None:
    """For code that a library ran under a signal and that returned instead of raising."""
    if _received:
        raise Interrupted(_last_signum or signal.SIGINT)
