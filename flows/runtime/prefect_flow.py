"""The Prefect side: one flow per method run, one task per stage instance, threads or Ray.

Imported only when something has to run (prefect, mlflow and ray cost seconds to import).
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.logging import get_run_logger

from flows.runtime import execute as execute_mod
from flows.runtime.dvc_bridge import DvcBridge
from flows.runtime.project import Project
from flows.runtime.runner import Instance, Outcome, Plan, current_metrics, git_info, say
from flows.runtime.tracking import Tracker

PROGRESS_EVERY_S = 2.0


class _ProgressReporter:
    """Throttled progress of a long stage: a log line and a Prefect progress artifact."""

    def __init__(self, name: str):
        self.name, self.last, self.artifact_id = name, 0.0, None

    def __call__(self, done: int, total: int, message: str = "") -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S and done < total:
            return
        self.last = now
        pct = 100.0 * done / max(total, 1)
        get_run_logger().info(f"{self.name}: {done}/{total} ({pct:.0f}%) {message}")
        try:
            if self.artifact_id is None:
                self.artifact_id = create_progress_artifact(
                    progress=pct, description=f"{self.name}: {message}")
            else:
                update_progress_artifact(self.artifact_id, progress=pct, description=f"{self.name}: {message}")
        except Exception:  # progress display must never fail a stage
            pass


def _run_stage(root: str, method: str, stage: str, item_key: str | None) -> dict[str, Any]:
    name = f"{stage}@{item_key}" if item_key else stage
    record = execute_mod.run_stage(Project(Path(root)), method, stage, item_key,
                                   on_progress=_ProgressReporter(name))
    return record.to_dict()


# The plain functions keep their own module-level names so that Ray's cloudpickle sends them
# by reference; a function reachable only through its Prefect wrapper is pickled by value,
# together with the module globals it reads (here: the driver's DVC repo, which cannot pickle).
run_stage_task = task(cache_policy=NO_CACHE, persist_result=False)(_run_stage)


def _task_runner(executor: str, ray_address: str | None):
    if executor == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=os.cpu_count() or 2)
    if executor != "ray":
        raise SystemExit(f"unknown executor {executor!r}; use threads or ray")
    from prefect_ray import RayTaskRunner

    if ray_address:
        return RayTaskRunner(address=ray_address)
    return RayTaskRunner(init_kwargs={
        "num_cpus": os.cpu_count() or 2, "include_dashboard": False,
        "object_store_memory": 256 * 1024**2, "_node_ip_address": "127.0.0.1",
        "runtime_env": {"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}},
        "log_to_driver": True,
    })


def _resource_options(executor: str, inst: Instance):
    if executor != "ray":
        return nullcontext()
    from prefect_ray.context import remote_options

    res = inst.stage.resources
    return remote_options(num_cpus=res.num_cpus, num_gpus=res.num_gpus)


def _api_server(executor: str, stack: ExitStack) -> None:
    """Under Ray every worker would start its own ephemeral Prefect server; start one here
    and point the workers at it (they inherit the environment when Ray starts)."""
    if executor != "ray" or os.environ.get("PREFECT_API_URL"):
        return
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = SubprocessASGIServer()
    server.start(timeout=180)
    stack.callback(server.stop)
    os.environ["PREFECT_API_URL"] = server.api_url
    stack.callback(os.environ.pop, "PREFECT_API_URL", None)
    stack.enter_context(temporary_settings({PREFECT_API_URL: server.api_url}))


def _upstream(plan: Plan, inst: Instance) -> list[str]:
    return [other.name for other in plan.run if other.stage.name in inst.stage.deps]


@dataclass
class _Driver:
    """What the flow body needs in the driver process. Kept out of the flow's arguments and
    closure: Ray pickles the flow with each task, and a DVC repo does not pickle."""
    project: Project
    bridge: DvcBridge
    tracker: Tracker
    plan: Plan
    outcome: Outcome
    executor: str
    parent: str


_DRIVERS: dict[str, _Driver] = {}


def _method_flow(driver_key: str) -> str:
    from prefect.runtime import flow_run

    d = _DRIVERS[driver_key]
    method, total = d.plan.method, len(d.plan.run)
    d.tracker.client.set_tag(d.parent, "prefect_flow_run_id", str(flow_run.id))
    progress = create_progress_artifact(progress=0.0, key=f"{method.name}-stages".replace("_", "-"),
                                        description=f"{method.name}: stages done / {total}")
    futures = {}
    for inst in d.plan.run:
        waits = [futures[n] for n in _upstream(d.plan, inst) if n in futures]
        with _resource_options(d.executor, inst):
            futures[inst.name] = run_stage_task.with_options(
                name=f"{method.name}.{inst.stage.name}", task_run_name=inst.name,
                retries=inst.stage.retries,
            ).submit(str(d.project.root), method.name, inst.stage.name, inst.item_key, wait_for=waits)
    by_future = {id(f): inst for inst, f in zip(d.plan.run, futures.values())}
    for future in as_completed(list(futures.values())):
        _record(d, by_future[id(future)], future)
        update_progress_artifact(progress, progress=100.0 * len(d.outcome.executed) / total)
    return d.parent


method_flow = flow(log_prints=True)(_method_flow)


def run_flow(project: Project, bridge: DvcBridge, plan: Plan, outcome: Outcome,
             executor: str, ray_address: str | None) -> None:
    method = plan.method
    tracker = Tracker(project)
    params = {k: v for k, v in plan.params.items() if k != "fanout"}
    parent = tracker.start_parent(method.name, plan.profile, params,
                                  {**git_info(project), "executor": executor, "pid": str(os.getpid())})
    outcome.parent_run_id = parent
    _DRIVERS[parent] = _Driver(project, bridge, tracker, plan, outcome, executor, parent)
    configured = method_flow.with_options(name=f"repro-{method.name}",
                                          task_runner=_task_runner(executor, ray_address))
    with ExitStack() as stack:
        stack.callback(_DRIVERS.pop, parent, None)
        _api_server(executor, stack)
        try:
            state = configured(parent, return_state=True)
            if state.is_failed() and not outcome.failed:  # the flow itself broke, not a stage
                state.result()
        finally:
            ok = not outcome.failed and len(outcome.executed) == len(plan.run)
            outcome.not_run = [i.name for i in plan.run
                               if i.name not in outcome.executed and i.name not in outcome.failed]
            tracker.log_parent_metrics(parent, current_metrics(project, method, plan.params))
            tracker.finish_parent(parent, ok, {"executed": str(len(outcome.executed))})


def _record(d: _Driver, inst: Instance, future) -> None:
    plan, outcome = d.plan, d.outcome
    try:
        payload = future.result()  # waits for the final state; raises the stage's error
    except Exception as err:  # noqa: BLE001 - any stage error is reported, others go on
        if any(word in type(err).__name__ for word in ("Upstream", "Unfinished")):
            return  # never ran because something upstream failed; listed as not run
        outcome.failed.append(inst.name)
        say(f"{plan.method.name}: {inst.name} FAILED: {type(err).__name__}: {err}")
        return
    record = execute_mod.StageRecord(**payload)
    dvc_info = d.bridge.commit(inst.addr)
    stage_params = {k: plan.params[k] for k in inst.stage.params}
    if inst.item_key:
        stage_params["item"] = plan.params["fanout"][inst.stage.name][inst.item_key]
    d.tracker.log_stage(d.parent, record, stage_params, dvc_info, plan.profile)
    outcome.executed.append(inst.name)
    say(f"{plan.method.name}: {inst.name} done in {record.ended - record.started:.1f}s")
