"""Worker processes for the local (``threads``) executor: one stage instance per process at a time.

Why processes: threads share one interpreter, and torch's and numpy's global RNGs and
``torch.set_num_threads`` are process-wide, so fan-out items running as threads reseeded and
re-threaded each other (two identical runs gave different accuracies). Prefect still schedules
with its thread pool; each task thread hands its instance to an idle worker here and relays
the worker's progress messages. Before every instance ``execute.run_stage`` resets the global
RNGs and thread limits (the same code runs in Ray workers and in ``repro exec``), so what an
instance computes depends on its params and seed only, not on which worker ran it or what ran
beside it.

Workers are spawned (never forked from a driver that holds Prefect's threads), ignore SIGINT
(the driver decides what an interrupt means), die with the driver (``PR_SET_PDEATHSIG`` on
Linux) and are killed by ``kill()`` when a run is cancelled.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
import threading
from contextlib import contextmanager
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

from flows.runtime.execute import StageError

_ACTIVE: "WorkerPool | None" = None


def active() -> "WorkerPool | None":
    """The pool of the run in progress in this process (None in Ray workers and ``repro exec``)."""
    return _ACTIVE


@contextmanager
def pool(size: int) -> Iterator["WorkerPool"]:
    global _ACTIVE
    workers = WorkerPool(size)
    _ACTIVE = workers
    try:
        yield workers
    finally:
        _ACTIVE = None
        workers.close()


class _Worker:
    def __init__(self, context) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, os.getpid()), daemon=True,
                                       name="repro-stage-worker")
        self.process.start()
        child.close()


class WorkerPool:
    def __init__(self, size: int):
        self.size = max(1, size)
        self._context = multiprocessing.get_context("spawn")
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._workers: list[_Worker] = []
        self._lock = threading.RLock()  # kill() may run in a signal handler
        self._stopped = False

    def _acquire(self) -> _Worker:
        with self._lock:
            if self._stopped:
                raise StageError("Cancelled", "the run was stopped before this stage started")
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                if len(self._workers) < self.size:  # started on demand: a short plan needs few
                    worker = _Worker(self._context)
                    self._workers.append(worker)
                    return worker
        while True:  # every worker is busy: wait for one, unless the run is stopped meanwhile
            try:
                return self._idle.get(timeout=0.5)
            except queue.Empty:
                if self._stopped:
                    raise StageError("Cancelled", "the run was stopped before this stage started")

    def run(self, job: dict[str, Any], on_progress: Callable[[int, int, str], None] | None) -> dict[str, Any]:
        """Run ``execute.run_stage(**job)`` in a worker; returns its record as a dict, raises
        ``StageError`` for the stage's exception (with its traceback text) or a dead worker."""
        worker = self._acquire()
        try:
            worker.conn.send(job)
            while True:
                ready = wait([worker.conn, worker.process.sentinel])
                if worker.conn in ready:
                    try:
                        kind, payload = worker.conn.recv()
                    except EOFError:
                        kind, payload = "died", None
                else:
                    kind, payload = "died", None
                if kind == "progress" and on_progress is not None:
                    on_progress(*payload)
                elif kind == "done":
                    return payload
                elif kind == "error":
                    raise payload
                elif kind == "died":
                    raise self._death(worker)
        finally:
            self._release(worker)

    def _death(self, worker: _Worker) -> StageError:
        worker.process.join(timeout=5)
        if self._stopped:
            return StageError("Cancelled", "the run was stopped while this stage ran")
        return StageError("WorkerDied", f"the stage's worker process exited with code "
                          f"{worker.process.exitcode} (killed, or out of memory?)")

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            if worker.process.is_alive() and not self._stopped:
                self._idle.put(worker)
            elif worker in self._workers:
                self._workers.remove(worker)  # a replacement starts on the next demand
                worker.conn.close()

    def kill(self) -> None:
        """Stop every worker now (a cancelled run): running instances end as cancelled."""
        with self._lock:
            self._stopped = True
            workers = list(self._workers)
        for worker in workers:
            if worker.process.is_alive():
                worker.process.kill()
        for worker in workers:
            worker.process.join(timeout=5)

    def close(self) -> None:
        with self._lock:
            self._stopped = True
            workers, self._workers = list(self._workers), []
        for worker in workers:
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        for worker in workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=5)
            worker.conn.close()


def _exit_when_orphaned(parent: int) -> None:
    """Workers may be started from Prefect's task threads, so the parent-death signal (tied to
    the starting thread) does not fit them: a watchdog thread polls for the driver instead."""
    import os
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="repro-orphan-watch").start()


def _worker_main(conn, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_when_orphaned(parent)
    from pathlib import Path

    from flows.runtime.execute import run_stage
    from flows.runtime.project import Project

    def progress(done: int, total: int, message: str = "") -> None:
        conn.send(("progress", (done, total, message)))

    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            job = dict(job)
            project = Project(Path(job.pop("root")))
            record = run_stage(project, on_progress=progress, **job)
            conn.send(("done", record.to_dict()))
        except BaseException as err:  # noqa: BLE001 - every failure goes back to the driver
            conn.send(("error", StageError.from_exception(err)))


# --- GPUs under the local executor: one GPU stage per visible device at a time --------------
_gpu_lock = threading.Lock()
_gpus: "tuple[int, queue.SimpleQueue[int]] | None" = None  # (devices visible, free device ids)


def _visible_gpus() -> int:
    """Counted once, and only when a planned stage wants a GPU (it imports torch)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@contextmanager
def gpu_slot(num_gpus: float, count: Callable[[], int] = _visible_gpus) -> Iterator[int | None]:
    """Reserve a device for a stage that declares GPUs: yields its index, waiting while every
    device is taken. With no GPU visible (or a CPU stage) yields None and the stage runs on CPU."""
    global _gpus
    if num_gpus <= 0:
        yield None
        return
    with _gpu_lock:
        if _gpus is None:
            free: queue.SimpleQueue[int] = queue.SimpleQueue()
            for index in range(count()):
                free.put(index)
            _gpus = (free.qsize(), free)
        total, free = _gpus
    if total == 0:
        yield None
        return
    device = free.get()
    try:
        yield device
    finally:
        free.put(device)


def reset_gpu_slots() -> None:
    """Forget the counted devices (tests)."""
    global _gpus
    with _gpu_lock:
        _gpus = None
