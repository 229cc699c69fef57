"""The driver of ``repro run``: decide with DVC, execute with Prefect (threads or Ray),
record with DVC and MLflow.

1. Write the profile's params file and the pipeline file (pydantic validates first: a bad
   key fails before anything is written).
2. Plan, in the driver, with DVC only: in topological order a stage instance is up to date
   (skip), restorable from DVC's run-cache (check out, record, skip), or runs. Anything
   downstream of a stage that runs also runs. Nothing stale -> return before Prefect, Ray
   or MLflow are even imported.
3. Submit the instances as Prefect tasks with ``wait_for`` on their upstream instances;
   independent stages and fan-out items run in parallel.
4. As each task finishes the driver commits it to DVC (dvc.lock + run-cache) and logs the
   MLflow child run. A failure stops only its downstream; what finished stays recorded, so
   the next ``repro run`` resumes from there.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from flows.runtime import interrupt, pipeline, workspace
from flows.runtime.dag import Method, Stage
from flows.runtime.dvc_bridge import DvcBridge, Staleness, stage_addr
from flows.runtime.project import EXECUTORS, Project, set_offline_env
from flows.runtime.scaleout import ScaleOut


@dataclass(frozen=True)
class Selection:
    """Which instances a run considers. ``only`` and ``force`` take ``STAGE`` or
    ``STAGE@ITEM`` (one fan-out item, e.g. ``train_ringworld@alf-0``)."""
    only: frozenset[str] = frozenset()
    start: str | None = None          # --from: this stage and everything downstream
    force: frozenset[str] = frozenset()
    to: str | None = None             # --to: this stage and everything it needs

    def validate(self, method: Method) -> None:
        """Unknown stage names fail in one line with the method's stages, before anything runs."""
        for option, names in (("--only", self.only), ("--force", self.force),
                              ("--from", [self.start] if self.start else []),
                              ("--to", [self.to] if self.to else [])):
            for name in sorted(names):
                stage = name.partition("@")[0]
                if stage not in {s.name for s in method.stages}:
                    raise SystemExit(f"[repro] {option} {name}: {method.name} has no stage {stage!r}; "
                                     f"stages: {', '.join(s.name for s in method.stages)}")
                if "@" in name and not method.stage(stage).fan_out:
                    raise SystemExit(f"[repro] {option} {name}: {stage} is not a fan-out stage")

    def stages(self, method: Method) -> list[Stage]:
        self.validate(method)
        keep = {s.name for s in method.stages}
        if self.only:
            keep &= {name.partition("@")[0] for name in self.only}
        if self.start:
            keep &= method.descendants({self.start})
        if self.to:
            keep &= ancestors(method, self.to)
        return [s for s in method.stages if s.name in keep]

    def selects(self, inst: "Instance") -> bool:
        items = {n for n in self.only if n.partition("@")[0] == inst.stage.name and "@" in n}
        return not items or inst.name in items

    def forces(self, inst: "Instance") -> bool:
        return inst.stage.name in self.force or inst.name in self.force

    def check_items(self, method: Method, names: set[str]) -> None:
        """A ``STAGE@ITEM`` that names no item of the current config fails, listing the items."""
        for option, given in (("--only", self.only), ("--force", self.force)):
            for name in sorted(n for n in given if "@" in n and n not in names):
                stage = name.partition("@")[0]
                items = sorted(n for n in names if n.startswith(f"{stage}@"))
                raise SystemExit(f"[repro] {option} {name}: no such item; {stage} has "
                                 f"{', '.join(items) or 'no items in this config'}")


def ancestors(method: Method, name: str) -> set[str]:
    out = {name}
    for stage in reversed(method.stages):  # declaration order is topological
        if stage.name in out:
            out.update(stage.deps)
    return out


@dataclass(frozen=True)
class Instance:
    stage: Stage
    item_key: str | None
    addr: str

    @property
    def name(self) -> str:
        return f"{self.stage.name}@{self.item_key}" if self.item_key else self.stage.name


@dataclass
class Plan:
    method: Method
    profile: str
    params: dict[str, Any]
    run: list[Instance] = field(default_factory=list)
    """Instances that run whatever happens upstream (stale themselves, or forced)."""
    pending: list[Instance] = field(default_factory=list)
    """Downstream of something that runs: checked again once their upstream is recorded, and
    run only if DVC then finds them stale (an upstream that re-ran with byte-identical outputs
    leaves them up to date, as in ``dvc repro``)."""
    reasons: dict[str, list[str]] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    params_text: str = ""
    """The params file as this run wrote it: a stage is committed only while it still reads so."""
    run_name: str | None = None
    """The MLflow parent run's name (default ``<method>-<profile>``)."""

    @property
    def work(self) -> list[Instance]:
        """Everything that may run, in topological order."""
        order = {inst.name: i for i, inst in enumerate(self.method_instances)}
        return sorted(self.run + self.pending, key=lambda inst: order[inst.name])

    method_instances: list[Instance] = field(default_factory=list)

    def upstream(self, inst: Instance) -> list[Instance]:
        """The planned instances (run or pending) whose outputs ``inst`` reads."""
        return [other for other in self.work if reads_from(inst, other)]


def reads_from(inst: Instance, other: Instance) -> bool:
    if other.stage.name not in inst.stage.deps:
        return False
    return other.stage.name not in inst.stage.item_deps or other.item_key == inst.item_key


@dataclass
class Outcome:
    method: str
    executed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    parent_run_id: str | None = None
    stage_spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per stage: first start and last end of its executed instances (epoch seconds)."""

    @property
    def stage_walls(self) -> dict[str, float]:
        return {stage: end - start for stage, (start, end) in self.stage_spans.items()}

    def add_span(self, stage: str, started: float, ended: float) -> None:
        start, end = self.stage_spans.get(stage, (started, ended))
        self.stage_spans[stage] = (min(start, started), max(end, ended))


def say(message: str) -> None:
    print(f"[repro] {message}", flush=True)


def instances(project: Project, method: Method, stage: Stage, params: dict[str, Any]) -> list[Instance]:
    keys = list(params.get(pipeline.FANOUT_KEY, {}).get(stage.name, {})) if stage.fan_out else [None]
    return [Instance(stage, k, stage_addr(project.root, method.name, stage.name, k)) for k in keys]


def validate_config(method: Method, profile: str, overrides: dict[str, Any]):
    """The method's config for this profile and overrides, checked (params, preflight, fan-outs)
    without writing anything; a problem exits with one line naming it."""
    from pydantic import ValidationError

    try:
        config = pipeline.build_config(method, profile, overrides)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                             + (f" (got {e['input']!r})" if e["type"] != "missing" else "")
                             for e in err.errors())
        raise SystemExit(f"[repro] invalid params for {method.name} (nothing was run or written): "
                         f"{problems}") from None
    try:
        config.preflight()
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(f"[repro] {method.name}: {one_line(err)}") from None
    pipeline.params_document(method, config, profile)   # non-empty fan-outs
    return config


def one_line(err: BaseException) -> str:
    text = str(err.args[0]) if isinstance(err, OSError) and err.args and not err.filename else str(err)
    return " ".join(text.split())


def prepare(project: Project, method: Method, profile: str, config) -> dict[str, Any]:
    doc = pipeline.params_document(method, config, profile)
    pipeline.write_pipeline(project, method)
    pipeline.write_params(project, method, config, profile)
    return doc


def plan_method(project: Project, bridge: DvcBridge, method: Method, profile: str,
                params: dict[str, Any], selection: Selection, dry_run: bool = False) -> Plan:
    """One ``Repo.status`` for the whole pipeline file; only an instance whose upstream was
    just restored from the run-cache is asked again (its inputs changed under it). With
    ``dry_run`` nothing is restored: what the run-cache holds is listed as restorable, and
    what is downstream of it as pending."""
    plan = Plan(method, profile, params)
    stale = bridge.pipeline_status(project.pipeline_file(method.name))
    restored: list[Instance] = []
    changing: list[Instance] = []   # upstream whose outputs this run may change
    plan.method_instances = [inst for stage in selection.stages(method)
                             for inst in instances(project, method, stage, params)]
    selection.check_items(method, {inst.name for inst in plan.method_instances})
    for inst in plan.method_instances:
        if not selection.selects(inst):
            continue
        upstream = [u for u in changing if reads_from(inst, u)]
        if selection.forces(inst):
            plan.reasons[inst.name] = ["forced (--force)"]
            plan.run.append(inst)
        elif upstream:
            names = ", ".join(sorted({u.stage.name for u in upstream}))
            plan.reasons[inst.name] = [f"after {names}: runs only if their outputs change"]
            plan.pending.append(inst)
        else:
            status = (bridge.status(inst.addr) if any(reads_from(inst, r) for r in restored)
                      else stale.get(inst.name, Staleness(inst.addr, ())))
            if status.up_to_date:
                plan.up_to_date.append(inst.name)
                continue
            if bridge.restore_from_run_cache(inst.addr, dry_run=dry_run):
                plan.restored.append(inst.name)
                plan.reasons[inst.name] = list(status.reasons)
                (changing if dry_run else restored).append(inst)
                continue
            plan.reasons[inst.name] = list(status.reasons)
            plan.run.append(inst)
        changing.append(inst)
    return plan


def prune_fanout_leftovers(project: Project, method: Method, params: dict[str, Any]) -> None:
    """What a fan-out item that the current config no longer has (e.g. a seed removed) left
    behind goes: its output folder (so downstream stages never read it), its metrics file (so
    the scorecard never counts it) and its dvc.lock entry. DVC's cache and run-cache still hold
    the item, so putting it back restores it instead of running it."""
    gone: list[str] = []
    locked = _locked_names(project.method_dir(method.name) / "dvc.lock")   # read once, not per stage
    for stage in method.stages:
        if not stage.fan_out:
            continue
        current = set(params[pipeline.FANOUT_KEY][stage.name])
        folder = project.stage_out(method.name, stage.name)
        if folder.is_dir():
            for child in folder.iterdir():
                if child.is_dir() and not child.name.startswith(".") and child.name not in current:
                    shutil.rmtree(child)
        metrics = project.metrics_file(method.name, stage.name, "-").parent
        for path in sorted(metrics.glob("*.json")) if metrics.is_dir() else []:
            if path.stem not in current:
                path.unlink()
        items = {name.partition("@")[2] for name in locked if name.startswith(f"{stage.name}@")}
        gone += [f"{stage.name}@{key}" for key in sorted(items - current)]
    if gone:
        _drop_lock_entries(project.method_dir(method.name) / "dvc.lock", gone)


def _locked_names(lock: Path) -> set[str]:
    if not lock.is_file():
        return set()
    return set((yaml.safe_load(lock.read_text()) or {}).get("stages", {}))


def _drop_lock_entries(lock: Path, names: list[str]) -> None:
    from dvc.utils.serialize import modify_yaml   # DVC's own round-trip editor for its files

    with modify_yaml(lock) as doc:
        for name in names:
            doc["stages"].pop(name, None)


def warn_unregistered_seeds(project: Project, method: Method, profile: str, params: dict[str, Any]) -> None:
    """The small profile's verdicts are pre-registered over the seeds in CLAIMS.md's front
    matter. Other seeds (a --set, an edited default) may run, but the run says so, so that a
    committed run on the wrong seeds is noticed before anyone reads its verdicts."""
    from flows.runtime.claims import ClaimsError, claims_file, load_claims

    if profile != "small" or "seeds" not in params:
        return
    try:
        claims = load_claims(project.root, method.name)
    except ClaimsError:
        return   # `repro report` names a broken front matter; a run need not
    if claims and claims.seeds and list(params["seeds"]) != list(claims.seeds):
        say(f"{method.name}: WARNING: seeds {list(params['seeds'])} are not the {claims.seeds} that "
            f"{claims_file(project.root, method.name).relative_to(project.root)} pre-registers; "
            "the scorecard's verdicts are defined over those")


def git_info(project: Project) -> dict[str, str]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=project.root, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    sha = git("rev-parse", "HEAD") or "none"
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", "components", "flows"))
    return {"git_sha": sha, "git_dirty": str(dirty).lower()}


def current_metrics(project: Project, method: Method, params: dict[str, Any]) -> dict[str, float]:
    """Every stage's summary metrics as they stand after the run (for ``repro compare``)."""
    from components.common.io import read_json
    from flows.runtime.tracking import numeric_metrics

    out: dict[str, float] = {}
    for stage in method.stages:
        if not stage.metrics:
            continue
        for inst in instances(project, method, stage, params):
            path = project.metrics_file(method.name, stage.name, inst.item_key)
            if path.is_file():
                for key, value in numeric_metrics(read_json(path)).items():
                    out[f"{inst.name}/{key}"] = value
    return out


def run(method_names: list[str], profile: str | None = None, selection: Selection = Selection(),
        overrides: dict[str, Any] | None = None, executor: str | None = None,
        ray_address: str | None = None, project: Project | None = None,
        data_root: str | None = None, dvc_remote: str | None = None,
        wait: bool = True, dry_run: bool = False, run_name: str | None = None) -> list[Outcome]:
    """``ray_address``, ``data_root`` and ``dvc_remote`` override the ``REPRO_*`` environment
    (see ``scaleout``). Another ``repro run`` in the same workspace is waited for, or with
    ``wait=False`` makes this one fail at once. ``dry_run``: plan and say why, run and restore
    nothing (the params and pipeline files are put back as they were). ``run_name``: the
    MLflow parent run's name."""
    from flows.runtime import registry

    project = project or Project.find()
    set_offline_env(project)
    settings = project.settings()
    scale = ScaleOut.from_env(ray_address=ray_address, data_root=data_root, dvc_remote=dvc_remote)
    profile = profile or settings["profile"]
    if scale.ray_address and executor == "threads":
        if ray_address:
            raise SystemExit("--executor threads contradicts --ray-address")
        scale = replace(scale, ray_address=None)  # an explicit --executor threads wins over the env
    executor = executor or ("ray" if scale.ray_address else settings["executor"])
    if executor not in EXECUTORS:
        raise SystemExit(f"[repro] unknown executor {executor!r}; use {' or '.join(EXECUTORS)}")
    methods = [registry.get(name) for name in method_names]
    for method in methods:   # every method checked before anything is written
        selection.validate(method)
    configs = {m.name: validate_config(m, profile, overrides or {}) for m in methods}
    with workspace.locked(project, method_names, wait, say=lambda m: print(m, flush=True)):
        if dry_run:
            return dry_run_methods(project, methods, profile, configs, selection)
        docs = {m.name: prepare(project, m, profile, configs[m.name]) for m in methods}
        return _run_methods(project, methods, docs, profile, selection, executor, scale, run_name)


def dry_run_methods(project: Project, methods: list[Method], profile: str, configs: dict[str, Any],
                    selection: Selection) -> list[Outcome]:
    """What a run would do, from DVC, with nothing executed, restored or recorded. DVC reads
    the params and pipeline files from disk, so they are written for the question and put back."""
    files = [f for m in methods for f in (project.params_file(m.name), project.pipeline_file(m.name))]
    saved = {f: f.read_bytes() if f.is_file() else None for f in files}
    bridge = DvcBridge(project.root)
    outcomes = []
    try:
        for method in methods:
            doc = prepare(project, method, profile, configs[method.name])
            plan = plan_method(project, bridge, method, profile, doc, selection, dry_run=True)
            report_plan(plan, dry_run=True)
            outcomes.append(Outcome(method.name, restored=list(plan.restored),
                                    up_to_date=list(plan.up_to_date),
                                    not_run=[i.name for i in plan.work]))
    finally:
        bridge.close()
        for path, data in saved.items():
            if data is None:
                path.unlink(missing_ok=True)
            else:
                pipeline.write_if_changed(path, data.decode())
    return outcomes


def _run_methods(project: Project, methods: list[Method], docs: dict[str, dict[str, Any]],
                 profile: str, selection: Selection, executor: str, scale: ScaleOut,
                 run_name: str | None = None) -> list[Outcome]:
    bridge = DvcBridge(project.root)
    outcomes, failures = [], []
    services = _Services(executor, scale, project)
    try:
        if scale.dvc_remote:
            from flows.runtime.dvc_bridge import configure_remote

            configure_remote(bridge, scale.dvc_remote)
        with interrupt.handled():  # Ctrl-C / SIGTERM stop the run, and `run all` with it
            for method in methods:  # one method failing does not stop the others
                try:
                    prune_fanout_leftovers(project, method, docs[method.name])
                    warn_unregistered_seeds(project, method, profile, docs[method.name])
                    plan = plan_method(project, bridge, method, profile, docs[method.name], selection)
                    plan.params_text = project.params_file(method.name).read_text()
                    plan.run_name = run_name
                    outcomes.append(execute(project, bridge, plan, executor, scale, services))
                except StageFailure as failure:
                    if len(methods) == 1:
                        raise
                    say(str(failure))
                    failures.append(failure)
                except Exception as err:  # noqa: BLE001 - e.g. the tracking store: next method
                    if len(methods) == 1:
                        raise
                    failure = StageFailure(Outcome(method.name, failed=["(runtime)"]),
                                           f"{method.name}: failed: {type(err).__name__}: {err}")
                    say(str(failure))
                    failures.append(failure)
    finally:
        try:
            services.close()
        finally:
            bridge.close()
    if failures:
        raise StageFailure.combined(failures)
    return outcomes


class _Services:
    """The Prefect server and Ray of one ``repro run`` invocation: started when the first method
    has work (a no-op run imports neither), stopped when the invocation ends."""

    def __init__(self, executor: str, scale: ScaleOut, project: Project):
        self.executor, self.scale, self.project = executor, scale, project
        self.stack: ExitStack | None = None

    def started(self) -> None:
        if self.stack is None:
            from flows.runtime.prefect_flow import start_services

            stack = ExitStack()
            try:
                start_services(stack, self.executor, self.scale, self.project)
            except BaseException:
                stack.close()
                raise
            self.stack = stack

    def close(self) -> None:
        if self.stack is not None:
            with interrupt.deferred():   # a second Ctrl-C must not leave the server running
                self.stack.close()


def report_plan(plan: Plan, dry_run: bool = False) -> None:
    name = plan.method.name
    prefix = "dry run: " if dry_run else ""
    if plan.up_to_date:
        say(f"{prefix}{name}: {len(plan.up_to_date)} stage(s) up to date: {', '.join(plan.up_to_date)}")
    for restored in plan.restored:
        verb = "would restore" if dry_run else "restored"
        why = f" ({'; '.join(plan.reasons[restored])})" if plan.reasons.get(restored) else ""
        say(f"{prefix}{name}: {verb} {restored} from the DVC run-cache{why}")
    for inst in plan.run:
        say(f"{prefix}{name}: {'would run' if dry_run else 'will run'} {inst.name} "
            f"({'; '.join(plan.reasons[inst.name])})")
    for inst in plan.pending:
        say(f"{prefix}{name}: {'would check' if dry_run else 'will check'} {inst.name} "
            f"({'; '.join(plan.reasons[inst.name])})")
    if dry_run and not plan.work:
        say(f"{prefix}{name}: nothing would run")


def execute(project: Project, bridge: DvcBridge, plan: Plan, executor: str,
            scale: ScaleOut, services: _Services) -> Outcome:
    report_plan(plan)
    outcome = Outcome(plan.method.name, restored=list(plan.restored), up_to_date=list(plan.up_to_date))
    if not plan.run:
        say(f"{plan.method.name}: nothing to run; executed 0 stages")
        if plan.restored:
            push_results(project, bridge, plan.method, scale)
        return outcome
    from flows.runtime import display
    from flows.runtime.prefect_flow import run_flow  # imports prefect: only when work exists

    live = display.RunDisplay.for_plan(plan)
    started = time.monotonic()
    display.activate(live)
    try:
        with live:
            services.started()
            run_flow(project, bridge, plan, outcome, executor, scale)
    finally:
        display.activate(None)
        print(display.summary(outcome, plan, time.monotonic() - started), end="", flush=True)
        if outcome.executed or plan.restored:  # what finished is shared even if others failed
            push_results(project, bridge, plan.method, scale)
    if outcome.failed:
        raise StageFailure(outcome)
    say(f"{plan.method.name}: executed {len(outcome.executed)} stage(s) "
        f"(MLflow run {outcome.parent_run_id})")
    return outcome


def push_results(project: Project, bridge: DvcBridge, method: Method, scale: ScaleOut) -> None:
    """With a DVC remote: ``dvc push --run-cache`` the method's recorded outputs. A failed push
    does not undo the run (everything is recorded locally); it says how to retry."""
    if not scale.dvc_remote:
        return
    from flows.runtime.dvc_bridge import push

    try:
        pushed = push(bridge, project.pipeline_file(method.name))
    except Exception as err:  # noqa: BLE001 - the run itself succeeded
        say(f"{method.name}: dvc push to {scale.dvc_remote} FAILED ({type(err).__name__}: {err}); "
            "results are recorded locally; retry with `dvc push --run-cache -r repro`")
        return
    say(f"{method.name}: pushed {pushed} file(s) and the run-cache to {scale.dvc_remote}")


class StageFailure(RuntimeError):
    def __init__(self, outcome: Outcome, message: str | None = None):
        self.outcome = outcome
        super().__init__(message or 
            f"{outcome.method}: failed: {', '.join(outcome.failed)}"
            + (f"; not run: {', '.join(outcome.not_run)}" if outcome.not_run else "")
            + f". Finished stages are recorded; `repro run {outcome.method}` resumes from here.")

    @classmethod
    def combined(cls, failures: list["StageFailure"]) -> "StageFailure":
        return cls(failures[0].outcome, "; ".join(str(f) for f in failures))
