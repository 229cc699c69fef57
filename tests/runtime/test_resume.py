"""The runtime end to end on the toy DAG: resume, no-op runs, run-cache, MLflow records,
atomic outputs after kill -9, and `dvc repro` as a second entry point."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows.runtime import runner
from flows.runtime.testing import make_project, run_in_temp_project

M = "toy_flow"


def child_runs(project, parent_id=None):
    from mlflow import MlflowClient

    client = MlflowClient(project.tracking_uri)
    exp = client.get_experiment_by_name(M)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags
            and (parent_id is None or r.data.tags["mlflow.parentRunId"] == parent_id)]


def instance(run) -> str:
    """``square@1``: the stage instance a child run records (its display name is longer)."""
    tags = run.data.tags
    return f"{tags['stage']}@{tags['item']}" if tags["item"] else tags["stage"]


def dvc(project, *args) -> str:
    # stage commands call `repro`, which lives next to this interpreter (an activated venv)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=project.root, capture_output=True,
                          text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": path})
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


@pytest.fixture
def toy(tmp_path):
    return make_project(tmp_path / "proj", [M])


def test_failure_then_resume_recomputes_nothing_finished(toy, monkeypatch):
    monkeypatch.setenv("TOY_FAIL_ON", "total")
    with pytest.raises(runner.StageFailure) as failure:
        run_in_temp_project(M, toy.root)
    first = failure.value.outcome
    assert sorted(first.executed) == ["make_data", "square@0", "square@1"]
    assert first.failed == ["total"]
    assert not (toy.root / "data" / M / "total").exists()   # nothing half-written

    monkeypatch.delenv("TOY_FAIL_ON")
    second = run_in_temp_project(M, toy.root)
    assert second.executed == ["total"]
    assert second.metrics(M, "total")["total"] == (0 + 1 + 4) * (1 + 4)

    # each stage instance was logged as finished exactly once across both runs, and the
    # first run's failure has its own FAILED child run
    names = sorted(instance(r) for r in child_runs(toy) if r.info.status == "FINISHED")
    assert names == ["make_data", "square@0", "square@1", "total"]
    assert [instance(r) for r in child_runs(toy) if r.info.status == "FAILED"] == ["total"]
    parents = {r.info.run_id: r.info.status for r in _parents(toy)}
    assert sorted(parents.values()) == ["FAILED", "FINISHED"]

    third = run_in_temp_project(M, toy.root)
    assert third.executed == [] and len(child_runs(toy)) == 5
    assert len(_parents(toy)) == 2          # a no-op run starts no MLflow run at all


def _parents(project):
    from mlflow import MlflowClient

    client = MlflowClient(project.tracking_uri)
    exp = client.get_experiment_by_name(M)
    return [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]


def test_child_run_records_params_metrics_lineage(toy):
    result = run_in_temp_project(M, toy.root)
    runs = {instance(r): r for r in child_runs(toy, result.outcomes[0].parent_run_id)}
    square = runs["square@1"]
    assert square.data.tags["mlflow.runName"] == f"{M} square seed=1 [smoke]"
    assert square.data.metrics["sum_sq"] == pytest.approx(4 * (0 + 1 + 4))
    assert square.data.params["item.seed"] == "1"
    assert square.data.tags["dvc.stage_hash"]
    lock = yaml.safe_load((toy.root / "data" / M / "dvc.lock").read_text())
    make_data_md5 = lock["stages"]["make_data"]["outs"][0]["md5"]
    digests = {d.dataset.name: d.dataset.digest for d in square.inputs.dataset_inputs}
    assert any(make_data_md5.startswith(d) for d in digests.values()), digests
    parent = [r for r in _parents(toy)][0]
    assert parent.data.tags["profile"] == "smoke" and "git_sha" in parent.data.tags
    assert parent.data.metrics["total/total"] == pytest.approx(5 * 5)


def test_profile_switch_and_back_restores_from_run_cache(toy):
    assert len(run_in_temp_project(M, toy.root, profile="smoke").executed) == 4
    assert len(run_in_temp_project(M, toy.root, profile="small").executed) == 4
    back = run_in_temp_project(M, toy.root, profile="smoke")
    assert back.executed == []
    assert sorted(back.outcomes[0].restored) == ["make_data", "square@0", "square@1", "total"]
    assert back.metrics(M, "make_data")["n"] == 3


def test_only_force_and_from(toy):
    run_in_temp_project(M, toy.root)
    forced = run_in_temp_project(M, toy.root, selection=runner.Selection(force=frozenset({"square"})))
    # byte-identical outputs leave downstream up to date (DVC's semantics)
    assert sorted(forced.executed) == ["square@0", "square@1"]
    assert sorted(forced.outcomes[0].up_to_date) == ["make_data", "total"]
    one = run_in_temp_project(M, toy.root, selection=runner.Selection(force=frozenset({"square@1"})))
    assert one.executed == ["square@1"]
    only = run_in_temp_project(M, toy.root, selection=runner.Selection(only=frozenset({"total"}),
                                                                      force=frozenset({"total"})))
    assert only.executed == ["total"]
    start = run_in_temp_project(M, toy.root, selection=runner.Selection(start="square"))
    assert start.executed == []              # --from only runs what is stale
    with pytest.raises(SystemExit, match="has no stage 'nope'"):
        run_in_temp_project(M, toy.root, selection=runner.Selection(only=frozenset({"nope"})))


def test_seed_added_runs_only_new_item(toy):
    run_in_temp_project(M, toy.root)
    more = run_in_temp_project(M, toy.root, overrides={"seeds": [0, 1, 2]})
    assert sorted(more.executed) == ["square@2", "total"]
    fewer = run_in_temp_project(M, toy.root, overrides={"seeds": [0]})
    assert fewer.executed == ["total"]
    assert fewer.metrics(M, "total")["n_parts"] == 1      # the dropped seeds are not read
    # regression: their dvc.lock entries and metrics files stayed, and the scorecard read them
    lock = yaml.safe_load((toy.method_dir(M) / "dvc.lock").read_text())["stages"]
    assert sorted(lock) == ["make_data", "square@0", "total"]
    assert [p.name for p in (toy.method_dir(M) / "metrics" / "square").glob("*.json")] == ["0.json"]
    back = run_in_temp_project(M, toy.root, overrides={"seeds": [0, 1]})
    assert sorted(back.outcomes[0].restored) == ["square@1"]   # from DVC's run-cache, not re-run


def test_kill_9_mid_stage_leaves_nothing_finished(toy):
    env = {**os.environ, "TOY_SLEEP_ON": "square", "TOY_SLEEP_S": "600", "REPRO_ROOT": str(toy.root)}
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "run", M, "--profile", "smoke"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    square_dir = toy.root / "data" / M / "square"
    lock = toy.root / "data" / M / "dvc.lock"

    def killable() -> bool:  # square is mid-stage and make_data's record is written
        return any(square_dir.glob(".tmp-*/started")) and lock.is_file() and "make_data" in lock.read_text()

    deadline = time.time() + 240
    while time.time() < deadline and not killable():
        time.sleep(0.5)
    assert killable(), "square never started"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (square_dir / "0").exists() and not (square_dir / "1").exists()

    resumed = run_in_temp_project(M, toy.root)
    assert sorted(resumed.executed) == ["square@0", "square@1", "total"]   # make_data kept
    assert not list(square_dir.glob(".tmp-*"))
    statuses = sorted(r.info.status for r in _parents(toy))
    assert statuses == ["FINISHED", "KILLED"]      # the killed driver's run did not stay RUNNING


@pytest.mark.slow   # CI time (17 s)
def test_dvc_cli_agrees_and_dvc_repro_is_a_second_entry_point(toy, tmp_path):
    run_in_temp_project(M, toy.root)
    assert "up to date" in dvc(toy, "status")
    assert "didn't change" in dvc(toy, "repro", "-P")

    # the same stages through `dvc repro` alone give the same hashes
    other = make_project(tmp_path / "other", [M])
    (other.root / "data" / M).mkdir(parents=True)
    for name in ("dvc.yaml", "params.yaml"):
        (other.root / "data" / M / name).write_text((toy.root / "data" / M / name).read_text())
    dvc(other, "repro", "-P")
    ours = yaml.safe_load((toy.root / "data" / M / "dvc.lock").read_text())["stages"]
    theirs = yaml.safe_load((other.root / "data" / M / "dvc.lock").read_text())["stages"]
    for stage in ours:
        assert [o["md5"] for o in ours[stage]["outs"]] == [o["md5"] for o in theirs[stage]["outs"]], stage
