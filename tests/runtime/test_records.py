"""Complete records whatever happens: a stage that raises, a recording that fails, a run killed
earlier, Ctrl-C and SIGTERM (both stop within seconds, leave no process behind, and resume)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.runtime import runner
from flows.runtime.testing import make_project, run_in_temp_project

M = "toy_flow"


def runs_of(project, method=M):
    from mlflow import MlflowClient

    client = MlflowClient(project.tracking_uri)
    experiment = client.get_experiment_by_name(method)
    return client, ([] if experiment is None else
                    client.search_runs([experiment.experiment_id], max_results=1000))


def children(runs, parent_id):
    return {(f"{r.data.tags['stage']}@{r.data.tags['item']}" if r.data.tags["item"] else r.data.tags["stage"]): r
            for r in runs if r.data.tags.get("mlflow.parentRunId") == parent_id}


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_failed_stage_and_stale_runs_are_recorded(tmp_path, monkeypatch):
    import socket

    project = make_project(tmp_path / "proj", [M])
    from mlflow import MlflowClient

    client = MlflowClient(project.tracking_uri)
    experiment = client.create_experiment(M, artifact_location=f"{project.artifact_root}/{M}")
    host = socket.gethostname()
    gone = client.create_run(experiment, tags={"pid": str(dead_pid()), "host": host}).info.run_id
    alive = client.create_run(experiment, tags={"pid": str(os.getpid()), "host": host}).info.run_id

    monkeypatch.setenv("TOY_FAIL_ON", "total")
    with pytest.raises(runner.StageFailure):
        run_in_temp_project(M, project.root)
    client, runs = runs_of(project)
    assert client.get_run(gone).info.status == "KILLED"       # its process was gone
    assert client.get_run(alive).info.status == "RUNNING"     # still going: left alone
    parent = next(r for r in runs if r.data.tags.get("profile") == "smoke" and "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.status == "FAILED"
    assert parent.data.tags["failed_stages"] == "total"
    assert parent.data.tags["mlflow.note.content"].startswith("failed: total")
    child = children(runs, parent.info.run_id)
    assert child["total"].info.status == "FAILED" and child["square@1"].info.status == "FINISHED"
    assert "injected failure in total" in child["total"].data.tags["error"]
    trace = client.download_artifacts(child["total"].info.run_id, "traceback.txt", str(tmp_path))
    text = Path(trace).read_text()
    assert "Traceback" in text and "toy_flow.py" in text and "injected failure in total" in text


def test_recording_errors_fail_only_their_instance_and_run_all_goes_on(tmp_path, monkeypatch):
    from flows.runtime.dvc_bridge import DvcBridge
    from flows.runtime.tracking import Tracker

    project = make_project(tmp_path / "proj", [M])
    commit, log_stage = DvcBridge.commit, Tracker.log_stage

    def broken_commit(self, addr):
        if addr.endswith(":square@1"):
            raise OSError("disk full (injected)")
        return commit(self, addr)

    def broken_log(self, parent, record, *args):
        if record.item_key == "0":
            raise ConnectionError("tracking store down (injected)")
        return log_stage(self, parent, record, *args)

    monkeypatch.setattr(DvcBridge, "commit", broken_commit)
    monkeypatch.setattr(Tracker, "log_stage", broken_log)
    with pytest.raises(runner.StageFailure) as failure:
        run_in_temp_project(M, project.root)
    outcome = failure.value.outcome
    # an instance that is not recorded failed: what reads it does not run (the next run redoes both)
    assert sorted(outcome.executed) == ["make_data"]
    assert sorted(outcome.failed) == ["square@0", "square@1"] and outcome.not_run == ["total"]
    _, runs = runs_of(project)
    child = children(runs, outcome.parent_run_id)
    assert child["make_data"].info.status == "FINISHED"
    assert child["square@1"].info.status == "FAILED"
    assert "committing it to DVC" in child["square@1"].data.tags["error"]

    # several methods: one whose tracking breaks before any stage does not stop the next
    start_parent = Tracker.start_parent

    def broken_start(self, method, *args):
        if method == M:
            raise ConnectionError("tracking store down (injected)")
        return start_parent(self, method, *args)

    monkeypatch.setattr(Tracker, "log_stage", log_stage)
    monkeypatch.setattr(DvcBridge, "commit", commit)
    monkeypatch.setattr(Tracker, "start_parent", broken_start)
    monkeypatch.setenv("REPRO_EXTRA_FLOWS", f"{os.environ['REPRO_EXTRA_FLOWS']},tests.runtime.rng_flow")
    make_project(project.root, ["rng_flow"])
    with pytest.raises(runner.StageFailure, match="tracking store down"):
        runner.run([M, "rng_flow"], profile="smoke", project=project, overrides=None)
    assert len(list((project.method_dir("rng_flow") / "metrics" / "fit").glob("*.json"))) == 3


# ------------------------------------------------------------------------- signals
def descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    left = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


@pytest.mark.parametrize("sig, to_group", [
    (signal.SIGINT, True),
    (signal.SIGTERM, False),   # hung before Prefect's own SIGTERM handler was replaced in the flow
], ids=["ctrl-c", "sigterm"])
def test_interrupt_stops_records_killed_and_resumes(tmp_path, monkeypatch, sig, to_group):
    """Ctrl-C reaches the whole foreground group (as from a terminal); SIGTERM only the driver."""
    extra = f"{os.environ['REPRO_EXTRA_FLOWS']},tests.runtime.rng_flow"
    monkeypatch.setenv("REPRO_EXTRA_FLOWS", extra)
    project = make_project(tmp_path / "proj", [M, "rng_flow"])
    env = {**os.environ, "TOY_SLEEP_ON": "square", "TOY_SLEEP_S": "600", "REPRO_ROOT": str(project.root),
           "REPRO_EXTRA_FLOWS": extra}
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "run", M, "rng_flow", "--profile", "smoke"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    square = project.root / "data" / M / "square"
    deadline = time.time() + 240
    while time.time() < deadline and len(list(square.glob(".tmp-*/started"))) < 2:
        time.sleep(0.5)
    assert len(list(square.glob(".tmp-*/started"))) == 2, "square never started"
    spawned = descendants(proc.pid)
    assert spawned, "the run has no worker or server processes?"
    sent = time.time()
    os.killpg(proc.pid, sig) if to_group else os.kill(proc.pid, sig)
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # a hung driver must not outlive the test
        proc.communicate()
        raise
    took = time.time() - sent
    assert proc.returncode == 128 + sig, output[-3000:]
    assert took < 20, f"took {took:.1f}s to stop"
    # the driver's own last word is one line (Prefect logs the cancelled tasks' errors above it)
    assert output.strip().splitlines()[-1].startswith("[repro] interrupted"), output[-3000:]
    time.sleep(1)
    assert not alive(spawned), f"left running: {alive(spawned)}"

    client, runs = runs_of(project)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.status == "KILLED"
    assert [n for n, r in children(runs, parent.info.run_id).items() if r.info.status == "FINISHED"] == ["make_data"]
    assert runs_of(project, "rng_flow")[1] == []             # `run all` did not go on

    resumed = run_in_temp_project(M, project.root)
    assert sorted(resumed.executed) == ["square@0", "square@1", "total"]
    assert not list(square.glob(".tmp-*"))     # the killed workers' temp folders: owner gone


def test_a_run_sends_prefect_events_before_its_server_stops(tmp_path):
    """Regression: events left queued for the run's stopped server were retried at exit, 7 s
    per attempt each, so a test session that ran many flows never exited (CI timed out)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    project = make_project(tmp_path / "proj", ["toy_flow"])
    runner.run(["toy_flow"], profile="smoke", executor="threads", project=project)
    assert not EventsWorker._instances and not APILogWorker._instances
