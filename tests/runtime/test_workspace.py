"""No concurrent damage, and clear errors with nothing written.

- a second `repro run` in one workspace waits for the first (naming it) or fails at once with
  --no-wait; outputs are committed only under the params they ran with;
- every user error exits non-zero with one line, no traceback, before any file is written.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import yaml

from flows.runtime import runner
from flows.runtime.testing import REPO_ROOT, make_project, run_in_temp_project

M = "toy_flow"


def cli(root, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "REPRO_ROOT": str(root), **(env or {})}, timeout=300)


def git(root, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                          capture_output=True, text=True, check=True).stdout


def test_second_run_waits_for_the_first_or_fails_with_no_wait(tmp_path):
    project = make_project(tmp_path / "proj", [M])
    slow = {"TOY_SLEEP_ON": "make_data", "TOY_SLEEP_S": "8"}
    first = subprocess.Popen([sys.executable, "-m", "flows.cli", "run", M, "--profile", "smoke"],
                             env={**os.environ, "REPRO_ROOT": str(project.root), **slow},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lock = project.root / ".dvc" / "tmp" / "repro-run.lock"
    deadline = time.time() + 120
    while time.time() < deadline and f"pid {first.pid}" not in (lock.read_text() if lock.exists() else ""):
        time.sleep(0.2)
    with pytest.raises(SystemExit, match=rf"busy: repro run {M} \(pid {first.pid}, started 20"):
        runner.run([M], profile="smoke", project=project, wait=False)
    refused = cli(project.root, "run", M, "--profile", "smoke", "--no-wait")
    assert refused.returncode != 0 and f"pid {first.pid}" in refused.stderr

    second = cli(project.root, "run", M, "--profile", "smoke")   # waits, then finds nothing to do
    first_out, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and "executed 4 stage(s)" in first_out
    assert second.returncode == 0, second.stderr
    assert f"waiting: repro run {M} (pid {first.pid}" in second.stdout
    assert "executed 0 stages" in second.stdout


def test_outputs_are_committed_only_with_the_params_they_ran_with(tmp_path, monkeypatch):
    project = make_project(tmp_path / "proj", [M])
    monkeypatch.setenv("TOY_SLEEP_ON", "square")
    monkeypatch.setenv("TOY_SLEEP_S", "3")
    params = project.params_file(M)
    square = project.stage_out(M, "square")

    def switch_params_mid_stage():   # what a profile switch or --set by someone else does
        deadline = time.time() + 120
        while time.time() < deadline and not list(square.glob(".tmp-*/started")):
            time.sleep(0.1)
        params.write_text(params.read_text().replace("n: 3", "n: 4"))

    threading.Thread(target=switch_params_mid_stage, daemon=True).start()
    with pytest.raises(runner.StageFailure) as failure:
        run_in_temp_project(M, project.root)
    assert sorted(failure.value.outcome.failed) == ["square@0", "square@1"]
    assert failure.value.outcome.not_run == ["total"]      # never runs on uncommitted inputs
    lock = yaml.safe_load((project.method_dir(M) / "dvc.lock").read_text())["stages"]
    assert list(lock) == ["make_data"]        # nothing that ran after the switch is committed


def test_instances_not_yet_started_fail_when_params_changed_since_the_plan(tmp_path, monkeypatch, caplog):
    """Regression (CI, stop 49): an edit landing between two instances' starts made DVC raise
    MissingParamsError out of the scheduler and broke the whole flow. Now an instance that starts
    after the params file changed fails alone, with the reason, and is never run."""
    from flows.runtime.dvc_bridge import DvcBridge

    project = make_project(tmp_path / "proj", [M])
    params = project.params_file(M)
    commit = DvcBridge.commit

    def commit_then_edit(self, addr):   # the edit lands right after make_data is committed
        info = commit(self, addr)
        if addr.endswith("make_data"):
            params.write_text(params.read_text().replace("n: 3", "n: 4"))
        return info

    monkeypatch.setattr(DvcBridge, "commit", commit_then_edit)
    with pytest.raises(runner.StageFailure) as failure:
        run_in_temp_project(M, project.root)
    outcome = failure.value.outcome
    assert outcome.executed == ["make_data"]
    assert sorted(outcome.failed) == ["square@0", "square@1"] and outcome.not_run == ["total"]
    said = caplog.text   # the flow's prints go to the Prefect run logger
    for name in ("square@0", "square@1"):   # failed before it started, not after it ran
        assert f"{name} FAILED: ParamsChanged: {params} changed since the run planned" in said
        assert f"will run {name}" not in said


def test_a_dvc_error_while_checking_one_instance_fails_only_that_instance(tmp_path, monkeypatch):
    """A half-written params.yaml makes DVC's own read raise; that instance fails, the flow goes on."""
    from dvc.dependency.param import MissingParamsError

    from flows.runtime.dvc_bridge import DvcBridge

    project = make_project(tmp_path / "proj", [M])
    status = DvcBridge.status

    def status_torn_for_square_1(self, addr):
        if addr.endswith("square@1"):
            raise MissingParamsError("Parameters 'fanout.square.1' are missing from 'params.yaml'.")
        return status(self, addr)

    monkeypatch.setattr(DvcBridge, "status", status_torn_for_square_1)
    with pytest.raises(runner.StageFailure) as failure:
        run_in_temp_project(M, project.root)
    outcome = failure.value.outcome
    assert sorted(outcome.executed) == ["make_data", "square@0"]
    assert outcome.failed == ["square@1"] and outcome.not_run == ["total"]


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """A toy project whose every file is committed, so `git status` shows any write."""
    root = tmp_path_factory.mktemp("errors") / "proj"
    project = make_project(root, [M])
    shutil.copy2(REPO_ROOT / ".gitignore", root / ".gitignore")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "clean")
    return project


BAD = {
    "unknown method (run)": ["run", "nope"],
    "unknown method (status)": ["status", "nope"],
    "unknown method (compare)": ["compare", "nope"],
    "unknown method (report)": ["report", "nope"],
    "unknown method (exec)": ["exec", "nope", "make_data"],
    "unknown stage (exec)": ["exec", M, "nope"],
    "unknown stage (--only)": ["run", M, "--only", "nope"],
    "unknown stage (--from)": ["run", M, "--from", "nope"],
    "unknown stage (--force)": ["run", M, "--force", "nope"],
    "bad --set type": ["run", M, "--set", "data.n=lots"],
    "bad --set key": ["run", M, "--set", "data.m=3"],
    "bad --set, second of two methods": ["run", M, "rng_flow", "--set", "data.n=4"],
    "bad --set, run all": ["run", "all", "--set", "data.n=4"],
    "bad --set syntax": ["run", M, "--set", "data.n"],
    "paper preflight": ["run", "anompi", "--profile", "paper"],
}


@pytest.mark.parametrize("args", BAD.values(), ids=BAD.keys())
def test_user_errors_are_one_line_and_write_nothing(committed, args):
    extra = {"REPRO_EXTRA_FLOWS": f"{os.environ['REPRO_EXTRA_FLOWS']},tests.runtime.rng_flow"}
    done = cli(committed.root, *args, env=extra)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert git(committed.root, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.parametrize("setting", ["profile: huge", "executor: fast"])
def test_bad_root_settings_are_one_line_and_write_nothing(committed, setting):
    root_params = committed.root / "params.yaml"
    before = root_params.read_text()
    key = setting.split(":")[0]
    root_params.write_text("\n".join(line for line in before.splitlines() if not line.startswith(key))
                           + f"\n{setting}\n")
    git(committed.root, "commit", "-q", "-am", "bad setting")
    try:
        done = cli(committed.root, "run", M)
        assert done.returncode != 0 and key in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert git(committed.root, "status", "--porcelain", "--untracked-files=all") == ""
    finally:
        root_params.write_text(before)
        git(committed.root, "commit", "-q", "-am", "restore")
