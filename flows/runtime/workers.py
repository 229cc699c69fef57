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
(the driver decides what an interrupt means), exit when the driver is gone (a watchdog thread)
and are killed by ``kill()`` when a run is cancelled. They are not daemonic, so stage code may
start processes of its own (a DataLoader's workers, a tokenizer pool).

A GPU instance gets a worker of its own whose ``CUDA_VISIBLE_DEVICES`` lists only the devices
reserved for it (as Ray does for its workers): ``cuda:0`` is its first device, and
``device_map="auto"`` or DDP see exactly its share.
"""
from __future__ import annotations

import math
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
    def __init__(self, context, env: dict[str, str] | None = None) -> None:
        self.conn, child = context.Pipe()
        self.dedicated = env is not None   # started for one instance (its own environment)
        self.process = context.Process(target=_worker_main, args=(child, os.getpid(), env or {}),
                                       daemon=False, name="repro-stage-worker")
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

    def _acquire(self, env: dict[str, str] | None = None) -> _Worker:
        with self._lock:
            if self._stopped:
                raise StageError("Cancelled", "the run was stopped before this stage started")
            if env is not None:   # beyond the pool's size: GPU slots already bound these
                worker = _Worker(self._context, env)
                self._workers.append(worker)
                return worker
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                if sum(not w.dedicated for w in self._workers) < self.size:  # on demand
                    worker = _Worker(self._context)
                    self._workers.append(worker)
                    return worker
        while True:  # every worker is busy: wait for one, unless the run is stopped meanwhile
            try:
                return self._idle.get(timeout=0.5)
            except queue.Empty:
                if self._stopped:
                    raise StageError("Cancelled", "the run was stopped before this stage started")

    def run(self, job: dict[str, Any], on_progress: Callable[[int, int, str], None] | None,
            env: dict[str, str] | None = None) -> dict[str, Any]:
        """Run ``execute.run_stage(**job)`` in a worker; returns its record as a dict, raises
        ``StageError`` for the stage's exception (with its traceback text) or a dead worker.
        With ``env``, in a new worker of its own with those variables set (then closed)."""
        worker = self._acquire(env)
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
        if worker.dedicated:
            with self._lock:
                if worker in self._workers:
                    self._workers.remove(worker)
            _stop(worker)
            return
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
            _stop(worker)


def _stop(worker: _Worker) -> None:
    """Ask the worker to exit; kill it if it does not within a few seconds."""
    try:
        worker.conn.send(None)
    except (OSError, ValueError):
        pass
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


def _worker_main(conn, parent: int, env: dict[str, str]) -> None:
    os.environ.update(env)   # before anything initialises CUDA
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


# --- GPUs under the local executor ----------------------------------------------------------
# Each visible device has a capacity of 1. A stage declaring n >= 1 GPUs takes ceil(n) whole
# devices; one declaring a fraction shares a device with others whose fractions fit (Ray's rule).
_gpu_lock = threading.Lock()
_ledger: "_GpuLedger | None" = None


class _GpuLedger:
    def __init__(self, devices: int):
        self.free = [1.0] * devices
        self.changed = threading.Condition()

    def _fit(self, num_gpus: float) -> list[int] | None:
        if num_gpus >= 1:
            whole = [i for i, free in enumerate(self.free) if free >= 1.0]
            need = math.ceil(num_gpus)
            return whole[:need] if len(whole) >= need else None
        return next(([i] for i, free in enumerate(self.free) if free >= num_gpus - 1e-9), None)

    def take(self, num_gpus: float) -> tuple[list[int], float]:
        if math.ceil(num_gpus) > len(self.free):
            raise StageError("NotEnoughGPUs", f"the stage declares {num_gpus:g} GPU(s) but "
                             f"{len(self.free)} are visible (CUDA_VISIBLE_DEVICES)")
        share = 1.0 if num_gpus >= 1 else num_gpus
        with self.changed:
            while (devices := self._fit(num_gpus)) is None:
                self.changed.wait(timeout=0.5)
            for i in devices:
                self.free[i] -= share
        return devices, share

    def give(self, devices: list[int], share: float) -> None:
        with self.changed:
            for i in devices:
                self.free[i] += share
            self.changed.notify_all()


def _visible_gpus() -> int:
    """Counted once, and only when a planned stage wants a GPU (it imports torch)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@contextmanager
def gpu_slot(num_gpus: float, count: Callable[[], int] | None = None) -> Iterator[list[int] | None]:
    """Reserve devices for a stage that declares GPUs: yields their indices, waiting while they
    are taken. With no GPU visible (or a CPU stage) yields None and the stage runs on CPU."""
    global _ledger
    if num_gpus <= 0:
        yield None
        return
    with _gpu_lock:
        if _ledger is None:
            _ledger = _GpuLedger((count or _visible_gpus)())
        ledger = _ledger
    if not ledger.free:
        yield None
        return
    devices, share = ledger.take(num_gpus)
    try:
        yield devices
    finally:
        ledger.give(devices, share)


def reset_gpu_slots() -> None:
    """Forget the counted devices (tests)."""
    global _ledger
    with _gpu_lock:
        _ledger = None
