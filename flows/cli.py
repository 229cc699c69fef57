"""``repro``: run, resume, inspect and compare method reproductions.

Heavy libraries (torch, prefect, mlflow, ray) are imported inside the commands that need
them, so ``repro status`` and a no-op ``repro run`` stay fast.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

import yaml

HELP = """Reproduce ICML 2026 methods as versioned, resumable pipelines.

Each method is a DAG of stages. DVC decides what is stale and versions every stage's
outputs, Prefect runs the stale stages (threads or Ray), MLflow records every run.

examples:
  repro list                               methods and their stages
  repro run linrnn                         the default (small) profile; resumes if interrupted
  repro run linrnn --profile smoke         a one-minute end-to-end check
  repro run all --executor ray             every method, stages placed by Ray
  repro run linrnn --force evaluate        re-run one stage even if it is up to date
  repro run linrnn --set two_state.n_paths=5000 --seeds 0 1
  repro status linrnn                      what is up to date / stale, and why (DVC's answer)
  repro compare linrnn                     tracked runs side by side (params that differ, metrics)
  repro compare linrnn --runs 1a2b 3c4d     two or more chosen runs (any profile or git revision)
  repro report                             the scorecard: reports/scorecard.md and .html
  repro report --readme                    regenerate the README's method table
  repro ui --port 5000                     the MLflow UI on 127.0.0.1
"""


def parse_overrides(pairs: list[str], seeds: list[int] | None) -> dict[str, Any]:
    """``a.b=value`` pairs (values parsed as YAML) into a nested dict."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"[repro] --set expects KEY=VALUE, got {pair!r}")
        node = overrides
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        try:
            node[leaf] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise SystemExit(f"[repro] --set {key}: {raw!r} is not a YAML value") from None
    if seeds is not None:
        overrides["seeds"] = seeds
    return overrides


def cmd_list(args: argparse.Namespace, with_wall_time: bool = False) -> None:
    from flows.runtime import registry

    for method in registry.all_methods():
        wall = f"  [small: {small_wall_time(method.name)}]" if with_wall_time else ""
        print(f"{method.name:12s} {method.title}{wall}")
        for stage in method.stages:
            fan = f"  [fan-out over {', '.join(stage.fan_out)}]" if stage.fan_out else ""
            print(f"    {stage.name}{fan}")


def small_wall_time(method: str) -> str:
    """The method's measured small-profile wall time: ``small_wall_s`` in the front matter of
    its CLAIMS.md (written by whoever measured it), or 'not recorded'."""
    from flows.runtime.claims import claims_file, split_front_matter
    from flows.runtime.project import Project

    try:
        path = claims_file(Project.find().root, method)
        front, _ = split_front_matter(path.read_text())
        seconds = float((yaml.safe_load(front) or {}).get("small_wall_s")) if front else None
    except (SystemExit, OSError, TypeError, ValueError, yaml.YAMLError):
        seconds = None
    if seconds is None:
        return "wall time not recorded"
    return f"~{seconds / 60:.0f} min" if seconds >= 90 else f"~{seconds:.0f} s"


def known_methods(names: list[str]) -> list[str]:
    """The names, checked: an unknown one exits with one line listing the known methods."""
    from flows.runtime import registry

    known = registry.method_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"[repro] unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def cmd_run(args: argparse.Namespace) -> None:
    from flows.runtime import registry, runner

    if not args.methods:
        print("repro run METHOD|all: which method? (measured small-profile wall times in brackets)")
        cmd_list(args, with_wall_time=True)
        return
    names = registry.method_names() if args.methods == ["all"] else known_methods(args.methods)
    selection = runner.Selection(only=frozenset(args.only or ()), start=args.start,
                                 force=frozenset(args.force or ()), to=args.to)
    try:
        runner.run(names, profile=args.profile, selection=selection,
                   overrides=parse_overrides(args.set or [], args.seeds),
                   executor=args.executor, ray_address=args.ray_address,
                   data_root=args.data_root, dvc_remote=args.dvc_remote, wait=not args.no_wait,
                   dry_run=args.dry_run, run_name=args.run_name)
    except runner.StageFailure as err:
        raise SystemExit(f"[repro] {err}") from None
    except KeyboardInterrupt as err:
        code = getattr(err, "exit_code", 130)
        print(f"[repro] interrupted ({err or 'SIGINT'}): running stages were stopped, finished ones "
              "are recorded; `repro run` again resumes", file=sys.stderr, flush=True)
        raise SystemExit(code) from None


def cmd_status(args: argparse.Namespace) -> None:
    from flows.runtime import pipeline, registry, runner
    from flows.runtime.dvc_bridge import DvcBridge
    from flows.runtime.project import Project, set_offline_env

    project = Project.find()
    set_offline_env(project)
    names = known_methods(args.methods) or registry.method_names()
    bridge = DvcBridge(project.root)
    try:
        for name in names:
            method = registry.get(name)
            params = pipeline.read_params(project, method)
            stale = bridge.pipeline_status(project.pipeline_file(name))  # one DVC call per method
            print(f"{name} (profile {params.get('profile')}):")
            for stage in method.stages:
                for inst in runner.instances(project, method, stage, params):
                    status = stale.get(inst.name)
                    state = "stale" if status else "up to date"
                    status = status or runner.Staleness(inst.addr, ())
                    print(f"  {inst.name:28s} {state}")
                    for reason in status.reasons:
                        print(f"      {reason}")
    finally:
        bridge.close()


def cmd_compare(args: argparse.Namespace) -> None:
    from flows.runtime.compare import compare_runs
    from flows.runtime.project import Project, set_offline_env

    known_methods([args.method])
    project = Project.find()
    set_offline_env(project)
    print(compare_runs(project, args.method, last=args.last, metric_filter=args.metric,
                       run_ids=args.runs))


def cmd_report(args: argparse.Namespace) -> None:
    from pathlib import Path

    from flows.runtime import registry, report
    from flows.runtime.claims import ClaimsError
    from flows.runtime.project import Project, set_offline_env

    project = Project.find()
    set_offline_env(project)
    known_methods(args.methods)
    methods = [registry.get(n) for n in args.methods] if args.methods else registry.all_methods()
    try:
        if args.readme:
            path = project.root / "README.md"
            text = report.readme_with_table(path.read_text(), report.methods_table(project, methods))
            path.write_text(text)
            print(f"[repro] README.md method table: {len(methods)} method(s)")
            return
        out_dir = Path(args.out) if args.out else project.root / "reports"
        reports = report.build(project, methods, args.profile, out_dir)
    except ClaimsError as err:
        raise SystemExit(f"[repro] {err}") from None
    for r in reports:
        print(f"  {r.method.name:12s} {r.verdict}")
    print(f"[repro] scorecard: {out_dir / 'scorecard.md'} and {out_dir / 'scorecard.html'}")


def cmd_ui(args: argparse.Namespace) -> None:
    """The MLflow UI and a persistent Prefect server (its database under the project), both on
    127.0.0.1; ``repro run`` uses that Prefect server while it answers. Ctrl-C stops both."""
    from flows.runtime import prefect_server
    from flows.runtime.processes import serve_until_stopped, start_group, stop_group
    from flows.runtime.project import Project, set_offline_env

    project = Project.find()
    set_offline_env(project)
    # Create or upgrade the tracking store here, before anything can use it: `mlflow ui`
    # migrating a fresh mlflow.db while a `repro run` opens it makes one of them fail
    # ("duplicate column name").
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=project.tracking_uri).search_experiments(max_results=1)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", project.tracking_uri,
               "--default-artifact-root", project.artifact_root,
               "--host", "127.0.0.1", "--port", str(args.port), "--workers", "1"]
    prefect = None
    if args.prefect_port:
        api_url = f"http://127.0.0.1:{args.prefect_port}/api"
        prefect = start_group(prefect_server.server_command(sys.executable, args.prefect_port),
                              env=prefect_server.server_env(os.environ, api_url, project))
        prefect_server.write_record(project, api_url)
        print(f"[repro] Prefect UI on http://127.0.0.1:{args.prefect_port} (API {api_url}; "
              "`repro run` uses it while it runs)", flush=True)
    print(f"[repro] MLflow UI on http://127.0.0.1:{args.port} (Ctrl-C to stop)", flush=True)
    try:
        code = serve_until_stopped(start_group(command, env=env))
    finally:
        if prefect is not None:
            stop_group(prefect)
            prefect_server.record_file(project).unlink(missing_ok=True)
    raise SystemExit(code)


def cmd_gen(args: argparse.Namespace) -> None:
    from flows.runtime import pipeline, registry
    from flows.runtime.project import Project

    project = Project.find()
    methods = registry.all_methods()
    print(f"root dvc.yaml: {'written' if pipeline.write_root_pipeline(project, methods) else 'up to date'}")
    for method in methods:
        changed = pipeline.write_pipeline(project, method)
        if not _params_file_valid(project, method):  # missing, or from an older config
            config = pipeline.build_config(method, "small")
            changed = pipeline.write_params(project, method, config, "small") or changed
        print(f"{method.name}: {'written' if changed else 'up to date'}")


def _params_file_valid(project, method) -> bool:
    from pydantic import ValidationError

    from flows.runtime import pipeline

    if not project.params_file(method.name).is_file():
        return False
    try:
        params = pipeline.read_params(project, method)
        config = pipeline.config_from_params(method, params)
        return params == pipeline.params_document(method, config, params["profile"])
    except (ValidationError, KeyError, TypeError):
        return False


def cmd_index(args: argparse.Namespace) -> None:
    """The root pipeline's cross-method stage: every method's metrics in one file."""
    from components.common.io import write_json_atomic
    from flows.runtime import pipeline, registry
    from flows.runtime.project import Project

    project = Project.find()
    index = pipeline.metrics_index(project, registry.all_methods())
    write_json_atomic(project.root / pipeline.INDEX_FILE, index)
    print(f"{pipeline.INDEX_FILE}: {len(index)} method(s) with metrics")


def cmd_exec(args: argparse.Namespace) -> None:
    """One stage instance, no Prefect or MLflow: the command DVC runs in ``dvc repro``."""
    from flows.runtime.execute import run_stage
    from flows.runtime.project import Project, set_offline_env

    known_methods([args.method])
    project = Project.find()
    set_offline_env(project)

    def progress(done: int, total: int, message: str = "") -> None:
        print(f"[{args.stage}] {done}/{total} {message}", flush=True)

    run_stage(project, args.method, args.stage, args.item, on_progress=progress)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="repro", description=HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="registered methods and their stages").set_defaults(func=cmd_list)

    run = sub.add_parser("run", help="run (or resume) methods: only stale stages execute")
    run.add_argument("methods", nargs="*", metavar="METHOD",
                     help="method name(s), or 'all'; none: list the methods with their small wall times")
    run.add_argument("--profile", choices=["smoke", "small", "paper"],
                     help="params profile (default: 'profile' in params.yaml, i.e. small)")
    run.add_argument("--only", action="append", metavar="STAGE[@ITEM]",
                     help="consider only this stage, or one fan-out item of it (repeatable)")
    run.add_argument("--from", dest="start", metavar="STAGE", help="consider this stage and everything downstream")
    run.add_argument("--to", metavar="STAGE", help="consider this stage and everything it needs")
    run.add_argument("--force", action="append", metavar="STAGE[@ITEM]",
                     help="re-run this stage (or one fan-out item) even if up to date")
    run.add_argument("--dry-run", action="store_true",
                     help="say what would run or be restored from the run-cache, and why; run nothing")
    run.add_argument("--run-name", metavar="NAME", help="name of the MLflow parent run")
    run.add_argument("--executor", choices=["threads", "ray"], help="where tasks run (default from params.yaml)")
    run.add_argument("--ray-address", metavar="ADDR",
                     help="an existing Ray cluster (implies --executor ray; env REPRO_RAY_ADDRESS)")
    run.add_argument("--data-root", metavar="URL", help="stage inputs/outputs through this fsspec "
                     "URL, e.g. s3://bucket/data, for workers without the workspace (env REPRO_DATA_ROOT)")
    run.add_argument("--dvc-remote", metavar="URL", help="push outputs and run-cache to this DVC "
                     "remote after the run, e.g. s3://bucket/dvc (env REPRO_DVC_REMOTE)")
    run.add_argument("--no-wait", action="store_true",
                     help="fail at once if another repro run holds this workspace (default: wait for it)")
    run.add_argument("--seeds", type=int, nargs="+", help="override the method's seeds")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a param, e.g. train.lr=0.01")
    run.set_defaults(func=cmd_run)

    status = sub.add_parser("status", help="per stage: up to date or stale, and why (from DVC)")
    status.add_argument("methods", nargs="*", metavar="METHOD")
    status.set_defaults(func=cmd_status)

    compare = sub.add_parser("compare", help="tracked runs of a method side by side")
    compare.add_argument("method")
    compare.add_argument("--last", type=int, default=10, help="how many recent runs (default 10)")
    compare.add_argument("--metric", help="only metrics whose name contains this text")
    compare.add_argument("--runs", nargs="+", metavar="RUN_ID",
                         help="compare these runs (ids or unique prefixes) instead of the latest ones")
    compare.set_defaults(func=cmd_compare)

    rep = sub.add_parser("report", help="the reproduction scorecard (Markdown + HTML) from the tracked runs")
    rep.add_argument("methods", nargs="*", metavar="METHOD", help="default: every registered method")
    rep.add_argument("--profile", default="small", choices=["smoke", "small", "paper"],
                     help="whose runs to report (default small)")
    rep.add_argument("--out", metavar="DIR", help="output folder (default reports/)")
    rep.add_argument("--readme", action="store_true",
                     help="instead, regenerate the method table in README.md from CLAIMS.md and committed metrics")
    rep.set_defaults(func=cmd_report)

    ui = sub.add_parser("ui", help="the MLflow UI and a persistent Prefect server on 127.0.0.1")
    ui.add_argument("--port", type=int, default=5000)
    ui.add_argument("--prefect-port", type=int, default=4200,
                    help="the persistent Prefect server's port (0: do not start one)")
    ui.set_defaults(func=cmd_ui)

    gen = sub.add_parser("gen", help="write every method's data/<m>/dvc.yaml from its declaration")
    gen.set_defaults(func=cmd_gen)

    sub.add_parser("index", help="collect every method's metrics into data/metrics_index.json "
                   "(the root dvc.yaml stage)").set_defaults(func=cmd_index)

    exe = sub.add_parser("exec", help="run one stage instance in place (used by dvc repro)")
    exe.add_argument("method")
    exe.add_argument("stage")
    exe.add_argument("--item", help="fan-out item key")
    exe.set_defaults(func=cmd_exec)
    return parser


def main(argv: list[str] | None = None) -> None:
    import logging

    # Prefect's log handlers can outlive its temporary API server at exit; a failed flush then
    # prints a traceback that says nothing about the run
    logging.raiseExceptions = False
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
