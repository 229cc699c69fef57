"""Run one stage instance: the same code path for Prefect tasks and for ``dvc repro``.

The stage writes into a temp folder next to its output; only when the function returns is
the old output replaced by a rename, so an interrupted stage (exception, ``kill -9``) never
leaves anything that looks finished. Returns a small record for the driver (never tensors).
"""
from __future__ import annotations

import os
import random
import shutil
import socket
import sys
import tempfile
import time
import traceback
import uuid
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from components.common.context import LocalContext
from components.common.io import write_json_atomic
from flows.runtime import pipeline, registry
from flows.runtime.dag import DeclaredParams, Method
from flows.runtime.project import Project
from flows.runtime.heap import keep_freed_memory

TMP_PREFIX = ".tmp-"


class StageError(RuntimeError):
    """A stage's failure as the driver sees it: the original type's name, its message and the
    traceback text. It pickles whatever the original exception held (worker pipes, Ray)."""

    def __init__(self, kind: str, message: str, traceback_text: str = ""):
        super().__init__(kind, message, traceback_text)
        self.kind, self.message, self.traceback_text = kind, message, traceback_text

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    @classmethod
    def from_exception(cls, err: BaseException) -> "StageError":
        if isinstance(err, StageError):
            return err
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        return cls(type(err).__name__, str(err), text)


@dataclass
class StageRecord:
    method: str
    stage: str
    item_key: str | None
    started: float
    ended: float
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[tuple[str, float, int | None, float]] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    node: dict[str, str] = field(default_factory=dict)
    data_root_files: list[str] | None = None
    """With a data root: the output files the worker uploaded (the driver fetches exactly these)."""

    @property
    def instance(self) -> str:
        return f"{self.stage}@{self.item_key}" if self.item_key else self.stage

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stage_inputs(project: Project, method: Method, stage_name: str, params: dict[str, Any],
                 item_key: str | None = None) -> dict[str, Any]:
    """Output folders of the upstream stages; a fan-out upstream gives ``{item_key: Path}``
    restricted to the items of the current config (stale leftovers are ignored), or, for an
    ``item_deps`` upstream, the folder of the item with this instance's key."""
    inputs: dict[str, Any] = {}
    fanouts = params.get(pipeline.FANOUT_KEY, {})
    stage = method.stage(stage_name)
    for dep in stage.deps:
        if dep in stage.item_deps:
            inputs[dep] = project.stage_out(method.name, dep, item_key)
        elif method.stage(dep).fan_out:
            inputs[dep] = {key: project.stage_out(method.name, dep, key) for key in fanouts[dep]}
        else:
            inputs[dep] = project.stage_out(method.name, dep)
    return inputs


def replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        trash = temp_dir_for(final)
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)


def instance_seed(method: str, stage: str, item_key: str | None) -> int:
    """A fixed seed per stage instance for the process-wide RNGs (see ``reset_global_rngs``)."""
    return zlib.crc32(f"{method}/{stage}/{item_key or ''}".encode())


def reset_global_rngs(seed: int) -> None:
    """Put python's, numpy's and torch's global RNGs in a state fixed by the instance, right
    before its function runs. A worker process runs many instances one after another; without
    this, a stage that draws before seeding (or never seeds) would depend on what ran before it
    in the same process. Stages still seed themselves from their params (``seed_everything``)."""
    random.seed(seed)
    import numpy as np

    np.random.seed(seed)
    if "torch" in sys.modules:  # a numpy-only stage: do not pay for importing torch
        import torch

        torch.manual_seed(seed)
        torch.set_default_dtype(torch.float32)


@contextmanager
def cpu_threads(num_cpus: float):
    """Hold torch and BLAS to the stage's declared CPUs: on a small machine, parallel stages
    that each start one thread per core slow each other down many times over. Thread counts
    are process-wide: this is only sound because every instance has its process to itself
    (a worker of ``workers.WorkerPool``, a Ray worker or ``repro exec``)."""
    from threadpoolctl import threadpool_limits

    n = max(1, int(num_cpus))
    with threadpool_limits(limits=n):
        if "torch" not in sys.modules:
            # not imported yet (a numpy-only stage, or one importing torch inside its
            # function): do not pay for it, but if the stage imports it, it starts with n threads
            with _environ(OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n)):
                yield
            return
        # `import` (not sys.modules) waits while another stage's thread is still importing it
        import torch

        previous = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(previous)


@contextmanager
def _environ(**values: str):
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def temp_dir_for(final: Path) -> Path:
    """``.tmp-<name>-<host>-<pid>-<random>``: the owner is in the name, so that only a folder
    whose owner is gone is ever removed by someone else."""
    owner = f"{socket.gethostname()}-{os.getpid()}"
    return final.with_name(f"{TMP_PREFIX}{final.name}-{owner}-{uuid.uuid4().hex[:8]}")


def _owner_gone(folder: Path, final: Path) -> bool:
    owner = folder.name[len(f"{TMP_PREFIX}{final.name}-"):].rsplit("-", 1)[0]
    host, _, pid = owner.rpartition("-")
    if host != socket.gethostname() or not pid.isdigit():
        return host == "" and not pid.isdigit()   # an old unnamed folder: no owner to ask
    from flows.runtime.processes import pid_alive

    return not pid_alive(int(pid))


def clean_stale_temps(final: Path) -> None:
    """Remove temp folders a killed run of this same instance left (they never count as
    outputs). Only this instance's (sibling fan-out items may be writing theirs right now),
    and only those whose owner process is gone (another ``repro run`` may be writing it)."""
    if final.parent.is_dir():
        for child in final.parent.glob(f"{TMP_PREFIX}{final.name}-*"):
            if _owner_gone(child, final):
                shutil.rmtree(child, ignore_errors=True)


def run_stage(project: Project, method_name: str, stage_name: str, item_key: str | None = None,
              on_progress: Callable[[int, int, str], None] | None = None,
              params: dict[str, Any] | None = None, data_root: str | None = None) -> StageRecord:
    """Run one instance. ``params`` (default: the workspace's params file) come from the driver
    when it runs on a worker; with ``data_root`` the inputs and outputs go through that store
    (see ``dataroot``) and the workspace is not touched: the driver fetches the output."""
    method = registry.get(method_name)
    try:
        stage = method.stage(stage_name)
    except KeyError as err:
        raise SystemExit(f"[repro] {err.args[0]}") from None
    params = params if params is not None else pipeline.read_params(project, method)
    config = pipeline.config_from_params(method, params)
    item: dict[str, Any] = {}
    if stage.fan_out:
        items = params.get(pipeline.FANOUT_KEY, {}).get(stage_name, {})
        if item_key not in items:
            raise SystemExit(f"{method_name}.{stage_name}: item {item_key!r} not in {sorted(items)}")
        item = items[item_key]

    final = project.stage_out(method_name, stage_name, item_key)  # the driver's workspace path
    if data_root:
        from flows.runtime.dataroot import DataRoot

        store = DataRoot(data_root)
        scratch = Path(tempfile.mkdtemp(prefix="repro-stage-"))
        tmp = scratch / "out"
        inputs = fetch_inputs(store, method, stage_name, params, scratch / "in", item_key)
    else:
        store, scratch = None, None
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_temps(final)
        tmp = temp_dir_for(final)
        inputs = stage_inputs(project, method, stage_name, params, item_key)
    ctx = LocalContext(out_dir=tmp, inputs=inputs, item=item, on_progress=on_progress)
    stage_function = stage.load()  # imports the stage's module (and torch) before limiting threads
    keep_freed_memory()  # fewer page faults in torch's CPU steps; no number changes (heap.py)
    started = time.time()
    files: list[str] = []
    try:
        with cpu_threads(stage.resources.num_cpus):
            reset_global_rngs(instance_seed(method_name, stage_name, item_key))
            stage_function(DeclaredParams(config, stage.params, stage_name), ctx)
        if store is not None:
            files = store.upload_dir(tmp, store.path(method_name, stage_name, item_key))
        else:
            if stage.metrics:
                write_json_atomic(project.metrics_file(method_name, stage_name, item_key), ctx.summary)
            replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    # artifacts were logged at their temp path; they now live under the final folder
    artifacts = [str(final / Path(a).relative_to(tmp)) if Path(a).is_relative_to(tmp) else str(a)
                 for a in ctx.artifacts]
    return StageRecord(method_name, stage_name, item_key, started, time.time(),
                       summary=ctx.summary, history=ctx.history, artifacts=artifacts,
                       node=node_info(), data_root_files=files if store is not None else None)


def fetch_inputs(store, method: Method, stage_name: str, params: dict[str, Any], into: Path,
                 item_key: str | None = None) -> dict[str, Any]:
    """Upstream outputs from the data root into node-local scratch, shaped like ``stage_inputs``."""
    local = stage_inputs(Project(into), method, stage_name, params, item_key)
    for dep, value in local.items():
        key = item_key if dep in method.stage(stage_name).item_deps else None
        targets = value.items() if isinstance(value, dict) else [(key, value)]
        for key, path in targets:
            store.download_dir(store.path(method.name, dep, key), path)
    return local


def node_info() -> dict[str, str]:
    """Where this instance ran (host, and the Ray node when under Ray): recorded as tags."""
    info = {"host": socket.gethostname()}
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            info["ray_node_id"] = context.get_node_id()
            info["ray_node_ip"] = ray.util.get_node_ip_address()
    return info
