"""The Prefect side: one flow per method run, one task per stage instance, threads or Ray.

Imported only when something has to run (prefect, mlflow and ray cost seconds to import).
"""
from __future__ import annotations

import os
import queue
import secrets
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from flows.runtime import execute as execute_mod
from flows.runtime import display, interrupt, workers
from flows.runtime.dvc_bridge import DvcBridge
from flows.runtime.processes import die_with_parent
from flows.runtime.project import Project
from flows.runtime.runner import Instance, Outcome, Plan, current_metrics, git_info, say
from flows.runtime.scaleout import ScaleOut, driver_host, is_loopback, ray_host
from flows.runtime.tracking import Tracker, process_tags

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
        live = display.current()
        if live is not None:  # the driver's terminal display (local executor)
            live.progress(self.name, done, total)
        get_run_logger().info(f"{self.name}: {done}/{total} ({pct:.0f}%) {message}")
        try:
            if self.artifact_id is None:
                self.artifact_id = create_progress_artifact(
                    progress=pct, description=f"{self.name}: {message}")
            else:
                update_progress_artifact(self.artifact_id, progress=pct, description=f"{self.name}: {message}")
        except Exception:  # progress display must never fail a stage
            pass


def _run_stage(root: str, method: str, stage: str, item_key: str | None,
               params: dict[str, Any], data_root: str | None, num_gpus: float = 0) -> dict[str, Any]:
    """The task body. With the local executor the instance runs in a worker process of the
    driver's pool (its own RNGs and thread counts); a GPU instance in a worker of its own that
    sees only the devices reserved for it (``workers.gpu_slot``); in a Ray worker it runs right
    here (Ray workers are processes that run one task at a time,
    and Ray itself assigns their GPUs)."""
    name = f"{stage}@{item_key}" if item_key else stage
    job = {"method_name": method, "stage_name": stage, "item_key": item_key, "params": params,
           "data_root": data_root}
    pool = workers.active()
    if pool is not None:
        live = display.current()
        with workers.gpu_slot(num_gpus) as devices:
            if live is not None:
                live.set(name, "running")
            env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))} if devices else None
            return pool.run({"root": root, **job}, _ProgressReporter(name), env=env)
    try:
        record = execute_mod.run_stage(Project(Path(root)), on_progress=_ProgressReporter(name), **job)
    except Exception as err:  # noqa: BLE001 - the driver gets the type, message and traceback
        raise execute_mod.StageError.from_exception(err) from None
    return record.to_dict()


# The plain functions keep their own module-level names so that Ray's cloudpickle sends them
# by reference; a function reachable only through its Prefect wrapper is pickled by value,
# together with the module globals it reads (here: the driver's DVC repo, which cannot pickle).
run_stage_task = task(cache_policy=NO_CACHE, persist_result=False)(_run_stage)


def _task_runner(executor: str, settings: ScaleOut):
    if executor == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=os.cpu_count() or 2)
    if executor != "ray":
        raise SystemExit(f"unknown executor {executor!r}; use threads or ray")
    from prefect_ray import RayTaskRunner

    address, init_kwargs = _ray_init_args(settings)
    # Ray is normally up already (``start_services``): the runner then uses it and leaves it up
    return RayTaskRunner(address=address, init_kwargs=init_kwargs)


def _ray_init_args(settings: ScaleOut) -> tuple[str | None, dict[str, Any]]:
    """``ray.init``'s address and keyword arguments for this run's settings."""
    if settings.ray_address:
        # An existing cluster: its workers do not inherit this process's environment, so the
        # Prefect API URL, tracking URI, data root and import path travel in the runtime_env.
        init_kwargs: dict[str, Any] = {"runtime_env": {"env_vars": settings.worker_env()},
                                       "log_to_driver": True}
        host = ray_host(settings.ray_address)
        if is_loopback(host) and host not in ("localhost", "127.0.0.1"):
            # a test cluster on loopback aliases (127.0.0.2, ...): attach to the head's raylet
            init_kwargs["_node_ip_address"] = host
        return settings.ray_address, init_kwargs
    return None, {
        "num_cpus": os.cpu_count() or 2, "include_dashboard": False,
        "object_store_memory": 256 * 1024**2, "_node_ip_address": "127.0.0.1",
        "runtime_env": {"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}},
        "log_to_driver": True,
    }


def start_services(services: ExitStack, executor: str, settings: ScaleOut,
                   project: Project | None = None) -> None:
    """What a whole ``repro run`` invocation shares, started once into ``services`` (closed
    when the invocation ends): the Prefect API server, then, for the Ray executor, one
    ``ray.init`` — so ``repro run all`` neither restarts Ray nor a temporary server per method,
    and Ray's workers never outlive the server they report to."""
    _api_server(executor, settings, services, project)  # before Ray: workers need its URL
    if executor == "ray":
        import ray

        if not ray.is_initialized():
            address, init_kwargs = _ray_init_args(settings)
            ray.init(address, **init_kwargs)
            services.callback(ray.shutdown)


def _resource_options(executor: str, inst: Instance, profile: str):
    if executor != "ray":
        return nullcontext()
    from prefect_ray.context import remote_options

    res = inst.stage.resources
    options: dict[str, Any] = {"num_cpus": res.num_cpus, "num_gpus": res.gpus(profile)}
    if res.custom:
        options["resources"] = dict(res.custom)
    if inst.item_key is not None:
        options["scheduling_strategy"] = "SPREAD"   # fan-out items over different nodes
    return remote_options(**options)


def _api_server(executor: str, settings: ScaleOut, stack: ExitStack, project: Project | None = None) -> None:
    """One Prefect API server for the run, started here and stopped when the run ends or is
    interrupted (left to itself, Prefect starts a temporary one that a signal could orphan).
    Under Ray every worker would otherwise start its own; they reach this one through
    ``PREFECT_API_URL`` (a local Ray inherits the environment; an existing cluster gets it
    through the runtime_env). For a cluster it listens where the workers can reach it
    (``REPRO_DRIVER_HOST``, or the address routing to the head) and requires a fresh
    ``PREFECT_SERVER_API_AUTH_STRING``; an existing server given by ``PREFECT_API_URL`` is used
    as is."""
    if os.environ.get("PREFECT_API_URL"):
        return
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    url = _persistent_server(settings, project)
    auth = None
    if url:
        say(f"Prefect: using the persistent server {url} (`repro ui`)")
    else:
        host = driver_host(settings) if executor == "ray" else "127.0.0.1"
        auth = None if is_loopback(host) else f"repro:{secrets.token_urlsafe(24)}"
        server = _reachable_server(host, auth)
        server.start(timeout=180)
        stack.callback(server.stop)
        url = server.api_url
    stack.callback(_flush_prefect_services)  # runs before server.stop: the server must still be up
    values = {"PREFECT_API_URL": url, **({"PREFECT_API_AUTH_STRING": auth} if auth else {})}
    for key, value in values.items():
        os.environ[key] = value
        stack.callback(os.environ.pop, key, None)
    stack.enter_context(temporary_settings({PREFECT_API_URL: url,
                                            **({PREFECT_API_AUTH_STRING: auth} if auth else {})}))


def _persistent_server(settings: ScaleOut, project: Project | None) -> str | None:
    """The API URL of ``repro ui``'s Prefect server when it answers; never for a remote Ray
    cluster, whose workers cannot reach 127.0.0.1."""
    if project is None or settings.ray_address:
        return None
    from flows.runtime.prefect_server import persistent_api_url

    return persistent_api_url(project)


def _flush_prefect_services(timeout: float = 60) -> None:
    """Send Prefect's queued events and logs while the run's server still listens. Left
    queued, they retry a stopped server at interpreter exit, 7 s per attempt per event: a
    process that ran many flows (a test session) then never exits."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        service.drain_all(timeout=timeout, at_exit=False)


def _reachable_server(host: str, auth: str | None = None):
    """Prefect's temporary API server, bound to ``host`` (Prefect's own binds 127.0.0.1 only)
    and started in a session of its own, so that a Ctrl-C in the terminal reaches the driver
    only: the driver stops the server after it has recorded the interrupted run. With Linux's
    parent-death signal it also ends if the driver is killed outright. (Overrides a private
    method of ``SubprocessASGIServer``: check it after Prefect upgrades; every runtime test
    starts one.)"""
    import socket

    from prefect.server.api import server as server_mod

    class ReachableServer(server_mod.SubprocessASGIServer):
        bind_host = host

        @property
        def address(self) -> str:
            return f"http://{self.bind_host}:{self.port}"

        def _run_uvicorn_command(self):
            import subprocess

            import prefect
            from prefect.settings import get_current_settings

            return subprocess.Popen(
                args=[sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent),
                      "--factory", "prefect.server.api.server:create_app", "--host", self.bind_host,
                      "--port", str(self.port), "--log-level", "error", "--lifespan", "on"],
                env={**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
                     "PREFECT__SERVER_FINAL": "1",
                     **get_current_settings().to_environment_variables(exclude_unset=True),
                     **({"PREFECT_SERVER_API_AUTH_STRING": auth} if auth else {})},
                start_new_session=True, preexec_fn=die_with_parent)

    with socket.socket() as probe:  # instances are cached per port: never share the None key
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    return ReachableServer(port)


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
    data_root: str | None


_DRIVERS: dict[str, _Driver] = {}


def _method_flow(driver_key: str) -> str:
    from prefect.runtime import flow_run

    interrupt.reclaim_sigterm()
    d = _DRIVERS[driver_key]
    d.tracker.client.set_tag(d.parent, "prefect_flow_run_id", str(flow_run.id))
    _Schedule(d).run()
    return d.parent


class _Schedule:
    """Submits an instance once everything it reads is recorded. A pending instance (one
    downstream of a re-run) is first asked of DVC again: up to date when its upstream came out
    byte-identical, restorable from the run-cache, or stale (then it runs)."""

    def __init__(self, d: _Driver):
        self.d, self.plan = d, d.plan
        self.futures: dict[str, Any] = {}
        self.resolved: dict[str, str] = {}   # name -> executed | failed | up_to_date | restored | not_run
        self.finished: queue.Queue = queue.Queue()
        self.pending = {inst.name for inst in self.plan.pending}
        self.work = self.plan.work
        self.upstream = {inst.name: self.plan.upstream(inst) for inst in self.work}
        self.total = len(self.work)
        method = self.plan.method.name
        self.progress = create_progress_artifact(
            progress=0.0, key=f"{method}-stages".replace("_", "-"),
            description=f"{method}: stage instances resolved / {self.total}")

    def run(self) -> None:
        self.advance()
        while any(name not in self.resolved for name in self.futures):
            inst, future = self._next_finished()
            _record(self.d, inst, future)
            outcome = self.d.outcome
            self.resolved[inst.name] = ("executed" if inst.name in outcome.executed else
                                        "failed" if inst.name in outcome.failed else "not_run")
            self._show(inst.name)
            update_progress_artifact(self.progress, progress=100.0 * len(self.resolved) / self.total)
            if not interrupt.interrupted():
                self.advance()

    def _settle(self, inst: Instance, state: str, listed: list[str], message: str) -> None:
        """A pending instance that DVC settled without running it."""
        listed.append(inst.name)
        self.resolved[inst.name] = state
        self._show(inst.name)
        self._share(inst)
        say(f"{self.plan.method.name}: {inst.name} {message}")

    def _fail(self, inst: Instance, error: execute_mod.StageError, doing: str = "") -> bool:
        """A pending instance that failed before it was submitted; the others go on."""
        _record_failure(self.d, inst, error, doing)
        self.resolved[inst.name] = "failed"
        self._show(inst.name)
        return True

    def _share(self, inst: Instance) -> None:
        """With a data root, an output settled here (not by a worker) goes there for downstream."""
        if self.d.data_root:
            from flows.runtime.dataroot import DataRoot

            store, method = DataRoot(self.d.data_root), self.plan.method.name
            store.upload_dir(self.d.project.stage_out(method, inst.stage.name, inst.item_key),
                             store.path(method, inst.stage.name, inst.item_key))

    def _show(self, name: str) -> None:
        live = display.current()
        if live is not None:
            live.set(name, {"executed": "done", "not_run": "skipped", "up_to_date": "up to date"}
                     .get(self.resolved[name], self.resolved[name]))

    def _next_finished(self):
        while True:  # a timeout keeps the main thread responsive to Ctrl-C / SIGTERM
            try:
                return self.finished.get(timeout=0.5)
            except queue.Empty:
                continue

    def advance(self) -> None:
        """Settle or submit every instance whose upstream is all resolved, until none changes."""
        changed = True
        while changed:
            changed = False
            for inst in self.work:
                if inst.name in self.resolved or inst.name in self.futures:
                    continue
                upstream = self.upstream[inst.name]
                states = [self.resolved.get(u.name) for u in upstream]
                if any(s in ("failed", "not_run") for s in states):
                    self.resolved[inst.name] = "not_run"
                    self._show(inst.name)
                    changed = True
                elif all(states):
                    changed = self._start(inst, upstream) or changed

    def _start(self, inst: Instance, upstream: list[Instance]) -> bool:
        """Returns True when the instance was settled (or failed) without running."""
        d = self.d
        changed = _params_changed(d)
        if changed:  # it would run, or be checked, under params this run did not plan with
            return self._fail(inst, changed)
        if inst.name in self.pending:
            with interrupt.deferred():
                try:
                    status = d.bridge.status(inst.addr)
                    if status.up_to_date:
                        self._settle(inst, "up_to_date", d.outcome.up_to_date, "up to date (upstream outputs unchanged)")
                        return True
                    if d.bridge.restore_from_run_cache(inst.addr):
                        self._settle(inst, "restored", d.outcome.restored, "restored from the DVC run-cache")
                        return True
                except Exception as err:  # noqa: BLE001 - e.g. params.yaml half-written by an edit
                    return self._fail(inst, execute_mod.StageError.from_exception(err),
                                      "checking it against DVC")
            self.plan.reasons[inst.name] = list(status.reasons)
            say(f"{self.plan.method.name}: will run {inst.name} ({'; '.join(status.reasons)})")
        waits = [self.futures[u.name] for u in upstream if u.name in self.futures]
        with _resource_options(d.executor, inst, self.plan.profile):
            future = run_stage_task.with_options(
                name=f"{self.plan.method.name}.{inst.stage.name}", task_run_name=inst.name,
                retries=inst.stage.retries,
            ).submit(str(d.project.root), self.plan.method.name, inst.stage.name, inst.item_key,
                     self.plan.params, d.data_root, inst.stage.resources.gpus(self.plan.profile),
                     wait_for=waits)
        self.futures[inst.name] = future
        future.add_done_callback(lambda f, inst=inst: self.finished.put((inst, f)))
        return False


method_flow = flow(log_prints=True)(_method_flow)


def run_flow(project: Project, bridge: DvcBridge, plan: Plan, outcome: Outcome,
             executor: str, settings: ScaleOut) -> None:
    """Run the plan's work as one Prefect flow run, on the invocation's Prefect server and Ray
    (``start_services``, started by the caller)."""
    method = plan.method
    if settings.data_root:
        upload_inputs(project, plan, settings.data_root)
    tracker = Tracker(project)
    for run_id in tracker.mark_dead_runs_killed(method.name):
        say(f"{method.name}: MLflow run {run_id} was left RUNNING by a process that is gone: KILLED")
    params = {k: v for k, v in plan.params.items() if k != "fanout"}
    tags = {**git_info(project), "executor": executor, **process_tags()}
    if settings.ray_address:
        tags["ray_address"] = settings.ray_address
    if settings.data_root:
        tags["data_root"] = settings.data_root
    parent = tracker.start_parent(method.name, plan.profile, params, tags, plan.run_name)
    outcome.parent_run_id = parent
    _DRIVERS[parent] = _Driver(project, bridge, tracker, plan, outcome, executor, parent,
                               settings.data_root)
    status = "FAILED"
    with ExitStack() as stack:
        stack.callback(_DRIVERS.pop, parent, None)
        try:
            if executor == "threads":  # stage code runs in worker processes, not these threads
                pool = stack.enter_context(workers.pool(min(os.cpu_count() or 2, len(plan.work))))
                stack.enter_context(interrupt.on_stop(pool.kill))
            configured = method_flow.with_options(name=f"repro-{method.name}",
                                                  task_runner=_task_runner(executor, settings))
            state = configured(parent, return_state=True)
            interrupt.raise_if_interrupted()
            if state.is_failed() and not outcome.failed:  # the flow itself broke, not a stage
                state.result()
            settled = set(outcome.executed) | set(outcome.restored) | set(outcome.up_to_date)
            complete = not outcome.failed and all(i.name in settled for i in plan.work)
            status = "FINISHED" if complete else "FAILED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            done = {*outcome.executed, *outcome.failed, *outcome.restored, *outcome.up_to_date}
            outcome.not_run = [i.name for i in plan.work if i.name not in done]
            with interrupt.deferred():
                _finish_parent(tracker, parent, status, project, plan, outcome)


def _finish_parent(tracker: Tracker, parent: str, status: str, project: Project, plan: Plan,
                   outcome: Outcome) -> None:
    """The parent run ends FINISHED, FAILED (naming the stages) or KILLED (interrupted)."""
    tags = {"executed": str(len(outcome.executed))}
    if outcome.failed:
        tags["failed_stages"] = ", ".join(outcome.failed)
    note = {"FAILED": f"failed: {', '.join(outcome.failed) or 'the flow itself (see the log)'}",
            "KILLED": "interrupted (SIGINT/SIGTERM); finished stages are recorded"}.get(status)
    if note:
        if outcome.not_run:
            note += f"; not run: {', '.join(outcome.not_run)}"
        tags["mlflow.note.content"] = note
    try:
        tracker.log_parent_metrics(parent, current_metrics(project, plan.method, plan.params))
    finally:
        tracker.finish_parent(parent, status, tags)


def _record(d: _Driver, inst: Instance, future) -> None:
    plan, outcome = d.plan, d.outcome
    try:
        payload = future.result()  # waits for the final state; raises the stage's error
    except Exception as err:  # noqa: BLE001 - any stage error is reported, others go on
        if any(word in type(err).__name__ for word in ("Upstream", "Unfinished")):
            return  # never ran because something upstream failed; listed as not run
        if interrupt.interrupted():
            return  # stopped by Ctrl-C/SIGTERM: not a failure of the stage, listed as not run
        _record_failure(d, inst, execute_mod.StageError.from_exception(err))
        return
    if payload is None:
        return  # cancelled by an interrupt: listed as not run
    record = execute_mod.StageRecord(**payload)
    if record.data_root_files is not None:  # the output is on the data root: mirror it here
        try:
            _fetch_output(d, inst, record)
        except Exception as err:  # noqa: BLE001 - not recorded, so stale: the next run redoes it
            _record_failure(d, inst, execute_mod.StageError.from_exception(err),
                            f"fetching its output from {d.data_root}")
            return
    changed = _params_changed(d, "while the stage ran")
    if changed:
        _record_failure(d, inst, changed)
        return
    with interrupt.deferred():  # a record is written whole, even when Ctrl-C comes meanwhile
        try:
            dvc_info = d.bridge.commit(inst.addr)
        except Exception as err:  # noqa: BLE001 - this instance fails, the others go on
            _record_failure(d, inst, execute_mod.StageError.from_exception(err), "committing it to DVC")
            return
        try:
            d.tracker.log_stage(d.parent, record, _stage_params(plan, inst), dvc_info, plan.profile)
        except Exception as err:  # noqa: BLE001
            outcome.failed.append(inst.name)
            say(f"{plan.method.name}: {inst.name} FAILED recording its MLflow run (its output is "
                f"committed to DVC): {type(err).__name__}: {err}")
            return
    outcome.executed.append(inst.name)
    outcome.add_span(inst.stage.name, record.started, record.ended)
    say(f"{plan.method.name}: {inst.name} done in {record.ended - record.started:.1f}s")


def _stage_params(plan: Plan, inst: Instance) -> dict[str, Any]:
    params = {k: plan.params[k] for k in inst.stage.params}
    if inst.item_key:
        params["item"] = plan.params["fanout"][inst.stage.name][inst.item_key]
    return params


def _params_changed(d: _Driver, when: str = "since the run planned") -> execute_mod.StageError | None:
    """The error to fail an instance with when the method's params file is no longer the text
    this run planned with (a profile switch, --set or an edit by someone else)."""
    path = d.project.params_file(d.plan.method.name)
    if not d.plan.params_text:
        return None
    try:
        if path.read_text() == d.plan.params_text:
            return None
    except OSError:   # moved away mid-edit: as changed as a different text
        pass
    return execute_mod.StageError(
        "ParamsChanged", f"{path} changed {when} (a profile switch, --set or an edit): "
        "not run or committed under params it did not plan with")


def _record_failure(d: _Driver, inst: Instance, error: execute_mod.StageError, doing: str = "") -> None:
    """The instance is listed as failed and gets a FAILED child run with its traceback; a
    tracking store that fails too is reported, never raised (the others still get recorded)."""
    d.outcome.failed.append(inst.name)
    where = f" {doing}" if doing else ""
    say(f"{d.plan.method.name}: {inst.name} FAILED{where}: {error}")
    with interrupt.deferred():
        try:
            d.tracker.log_failed_stage(d.parent, d.plan.method.name, inst.stage.name, inst.item_key,
                                       _stage_params(d.plan, inst), f"{where.strip()} {error}".strip(),
                                       error.traceback_text, d.plan.profile)
        except Exception as err:  # noqa: BLE001
            say(f"{d.plan.method.name}: {inst.name}: recording the failure in MLflow failed too: "
                f"{type(err).__name__}: {err}")


def _fetch_output(d: _Driver, inst: Instance, record: execute_mod.StageRecord) -> None:
    from components.common.io import write_json_atomic
    from flows.runtime.dataroot import DataRoot

    store = DataRoot(d.data_root)
    method = d.plan.method.name
    final = d.project.stage_out(method, inst.stage.name, inst.item_key)
    execute_mod.clean_stale_temps(final)
    store.fetch_into_place(store.path(method, inst.stage.name, inst.item_key), final,
                           record.data_root_files)
    if inst.stage.metrics:
        write_json_atomic(d.project.metrics_file(method, inst.stage.name, inst.item_key), record.summary)


def upload_inputs(project: Project, plan: Plan, data_root: str) -> None:
    """Inputs of the planned stages that this run does not produce (up to date, or restored
    from the run-cache) go to the data root first, so workers anywhere can read them."""
    from flows.runtime.dataroot import DataRoot

    store = DataRoot(data_root)
    method, running = plan.method, {inst.stage.name for inst in plan.work}
    needed = {dep for inst in plan.work for dep in inst.stage.deps if dep not in running}
    for dep in sorted(needed):
        stage = method.stage(dep)
        keys = list(plan.params.get("fanout", {}).get(dep, {})) if stage.fan_out else [None]
        for key in keys:
            local = project.stage_out(method.name, dep, key)
            if not local.is_dir():
                raise SystemExit(f"{method.name}.{dep}: {local} is missing; run without --only")
            store.upload_dir(local, store.path(method.name, dep, key))
    if needed:
        say(f"{method.name}: uploaded inputs {', '.join(sorted(needed))} to {data_root}")
