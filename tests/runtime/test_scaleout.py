"""Scale-out with real parts on loopback: a two-node `ray start` cluster, a moto S3 server as
the data root and DVC remote, and an `mlflow server` with its artifacts on S3.

- the toy method runs through `repro run --ray-address` with fan-out items on both nodes, its
  outputs on S3, its DVC objects and run-cache on the S3 remote, its runs on the server;
- a second clone `dvc pull`s, sees every stage up to date and `repro run` executes nothing;
- (slow) the worker node is SIGKILLed mid-stage: nothing half-recorded, the next run resumes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from flows.runtime.testing import make_project
from tests.runtime.cluster import MlflowServer, RayCluster, S3Server, wait_until

M = "toy_flow"
INSTANCES = ["make_data", "square@0", "square@1", "total"]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server.start(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tracking(s3, tmp_path_factory):
    server = MlflowServer.start(tmp_path_factory.mktemp("mlflow"), s3)
    yield server
    server.stop()


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def cli(root: Path, *args: str, env: dict[str, str], check: bool = True,
        timeout: float = 600) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run([sys.executable, "-m", *args], cwd=root, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env, "REPRO_ROOT": str(root), "PATH": path})
    if check:
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done


def rest(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=30).read())


def server_runs(url: str) -> list[dict]:
    experiments = rest(url, "experiments/search", {"max_results": 100})["experiments"]
    ids = [e["experiment_id"] for e in experiments if e["name"] == M]
    return rest(url, "runs/search", {"experiment_ids": ids, "max_results": 1000}).get("runs", []) if ids else []


def tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def lock_outs(root: Path) -> dict[str, str]:
    lock = yaml.safe_load((root / "data" / M / "dvc.lock").read_text())["stages"]
    return {name: out["md5"] for name, entry in lock.items()
            for out in entry["outs"] if not out["path"].startswith("metrics/")}


def check_outputs_on_s3(s3, project, prefix: str) -> None:
    """Outputs on the data root, mirrored into the workspace; every recorded output and the
    run-cache on the DVC remote; the remote's URL only in the local (uncommitted) config."""
    fs, bucket = s3.fs(), s3.bucket
    data = f"{bucket}/{prefix}/data/{M}"
    assert fs.exists(f"{data}/square/1/squares.json") and fs.exists(f"{data}/total/total.json")
    assert json.loads(fs.cat(f"{data}/total/total.json")) == \
        json.loads((project.root / "data" / M / "total" / "total.json").read_text())
    assert not list((project.root / "data" / M).glob("**/.tmp-*"))
    remote = {p.rsplit("/", 2)[-2] + p.rsplit("/", 1)[-1] for p in fs.find(f"{bucket}/{prefix}/dvc/files/md5")}
    for name, md5 in lock_outs(project.root).items():
        assert md5 in remote, (name, md5)
    assert fs.find(f"{bucket}/{prefix}/dvc/runs")                 # the run-cache was pushed
    local_config = (project.root / ".dvc" / "config.local").read_text()
    assert f"s3://{bucket}/{prefix}/dvc" in local_config and "testing" not in local_config
    assert "s3://" not in (project.root / ".dvc" / "config").read_text()


def store_options(s3, prefix: str) -> list[str]:
    return ["--data-root", f"s3://{s3.bucket}/{prefix}/data", "--dvc-remote", f"s3://{s3.bucket}/{prefix}/dvc"]


def test_s3_data_root_remote_tracking_server_and_second_clone(s3, tracking, tmp_path):
    """Threads executor (no cluster): the CI-sized check of the storage and tracking side."""
    env = {**s3.env, "MLFLOW_TRACKING_URI": tracking.url}
    project = make_project(tmp_path / "proj", [M])
    started = time.time()
    run = cli(project.root, "flows.cli", "run", M, "--profile", "smoke", "--executor", "threads",
              *store_options(s3, "t1"), env=env)
    print(f"run with data root + push: {time.time() - started:.1f}s")
    assert "executed 4 stage(s)" in run.stdout and "run-cache to s3://" in run.stdout, run.stdout
    check_outputs_on_s3(s3, project, "t1")
    runs = server_runs(tracking.url)
    assert len(runs) == 5 and not (project.root / "mlflow.db").exists()
    total = next(r for r in runs if tags(r).get("stage") == "total")
    assert total["info"]["artifact_uri"].startswith("mlflow-artifacts:")      # proxied by the server
    assert any(p.endswith("total.json") for p in s3.fs().find(f"{s3.bucket}/mlflow"))  # ... to S3

    # a second clone: dvc pull, every stage up to date, repro run executes nothing
    (project.root / ".gitignore").write_text("/.prefect\n")
    git(project.root, "add", "-A")
    git(project.root, "commit", "-qm", "toy run")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project.root), str(clone))
    assert not (clone / "data" / M / "total").exists()
    started = time.time()
    cli(clone, "dvc", "remote", "add", "--local", "-d", "repro", f"s3://{s3.bucket}/t1/dvc", env=env)
    cli(clone, "dvc", "pull", "--run-cache", env=env)
    status = cli(clone, "flows.cli", "status", M, env=env).stdout
    assert status.count("up to date") == 4 and "stale" not in status, status
    again = cli(clone, "flows.cli", "run", M, "--profile", "smoke", env=env).stdout
    print(f"clone: pull + status + no-op run: {time.time() - started:.1f}s")
    assert "executed 0 stages" in again and "restored" not in again, again
    assert (clone / "data" / M / "total" / "total.json").read_text() == \
        (project.root / "data" / M / "total" / "total.json").read_text()
    assert len(server_runs(tracking.url)) == len(runs)      # a no-op run logs nothing


@pytest.mark.slow
def test_cluster_places_fan_out_on_both_nodes(s3, tracking, tmp_path):
    before = {r["info"]["run_id"] for r in server_runs(tracking.url)}
    started = time.time()
    cluster = RayCluster.start(s3.env, workers=1)   # the nodes carry their own credentials
    print(f"two-node cluster up: {time.time() - started:.1f}s")
    # the driver's Prefect API listens on the head's address, not only on 127.0.0.1
    env = {**s3.env, "MLFLOW_TRACKING_URI": tracking.url, "REPRO_DRIVER_HOST": cluster.nodes[0].ip}
    try:
        project = make_project(tmp_path / "proj", [M])
        started = time.time()
        run = cli(project.root, "flows.cli", "run", M, "--profile", "smoke",
                  "--ray-address", cluster.address, *store_options(s3, "t2"), env=env)
        print(f"cluster run: {time.time() - started:.1f}s")
    finally:
        cluster.stop()
    assert "executed 4 stage(s)" in run.stdout, run.stdout
    runs = [r for r in server_runs(tracking.url) if r["info"]["run_id"] not in before]
    children = {tags(r)["stage"] + (f"@{tags(r)['item']}" if tags(r)["item"] else ""): tags(r)
                for r in runs if "mlflow.parentRunId" in tags(r)}
    assert sorted(children) == INSTANCES
    node_ips = {name: t["node.ray_node_ip"] for name, t in children.items()}
    assert {node_ips["square@0"], node_ips["square@1"]} == {n.ip for n in cluster.nodes}, node_ips
    assert len({t["node.ray_node_id"] for t in children.values()}) == 2
    parent = next(tags(r) for r in runs if "mlflow.parentRunId" not in tags(r))
    assert parent["ray_address"] == cluster.address and parent["executor"] == "ray"
    check_outputs_on_s3(s3, project, "t2")


@pytest.mark.slow
def test_worker_node_killed_mid_stage_then_resume(s3, tracking, tmp_path):
    bucket = s3.bucket
    env = {**s3.env, "MLFLOW_TRACKING_URI": tracking.url, "TOY_SLEEP_ON": "square", "TOY_SLEEP_S": "20",
           "REPRO_RAY_FORWARD_ENV": "TOY_SLEEP_ON,TOY_SLEEP_S", "REPRO_DATA_ROOT": f"s3://{bucket}/t3/data"}
    project = make_project(tmp_path / "proj", [M])
    cluster = RayCluster.start(s3.env, workers=1)
    head, worker = cluster.nodes
    proc = None
    try:
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        log = tmp_path / "run.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "run", M, "--profile", "smoke", "--ray-address", cluster.address],
            env={**os.environ, **env, "REPRO_ROOT": str(project.root), "PATH": path},
            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        # a square instance is mid-stage in the worker node's scratch
        wait_until(lambda: any(worker.tmpdir.glob("repro-stage-*/out/started")), 300,
                   "square on the worker node", proc)
        cluster.kill(worker)
        killed_at = time.time()
        proc.wait(timeout=400)
        output = log.read_text()
        print(f"run ended {time.time() - killed_at:.1f}s after the kill, rc={proc.returncode}")

        recorded = lock_outs(project.root)
        assert "make_data" in recorded
        ws = project.root / "data" / M
        assert not list(ws.glob("**/.tmp-*"))                      # no half-fetched output
        for item in ("0", "1"):                                    # output present <=> recorded
            assert (ws / "square" / item).is_dir() == (f"square@{item}" in recorded), (item, output)
        if proc.returncode == 0:   # Ray re-ran the lost task on the surviving node
            assert "executed 4 stage(s)" in output, output
        else:                      # or the run failed and said which stage, and how to resume
            assert "FAILED" in output and "square@" in output and "resumes" in output, output[-3000:]

        # the next run (the head node alone) executes only what was not recorded
        env.pop("TOY_SLEEP_ON")
        resumed = cli(project.root, "flows.cli", "run", M, "--profile", "smoke",
                      "--ray-address", cluster.address, env=env).stdout
        missing = [i for i in INSTANCES if i not in recorded]
        if missing:
            assert f"executed {len(missing)} stage(s)" in resumed, resumed
        else:
            assert "executed 0 stages" in resumed
        assert sorted(lock_outs(project.root)) == INSTANCES
        assert json.loads((ws / "total" / "total.json").read_text()) == {"0": 5.0, "1": 20.0}
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, 9)
        cluster.stop()


def test_settings_come_from_env_and_secrets_stay_out_of_worker_env(monkeypatch):
    from flows.runtime.scaleout import ScaleOut, driver_host

    monkeypatch.setenv("REPRO_DATA_ROOT", "s3://b/data/")
    monkeypatch.setenv("REPRO_RAY_ADDRESS", "127.0.0.9:6379")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw")
    monkeypatch.setenv("TOY_X", "1")
    monkeypatch.setenv("REPRO_RAY_FORWARD_ENV", "TOY_X")
    settings = ScaleOut.from_env(ray_address=None, dvc_remote="s3://b/dvc")
    assert settings.data_root == "s3://b/data" and settings.dvc_remote == "s3://b/dvc"
    assert settings.ray_address == "127.0.0.9:6379"
    assert ScaleOut.from_env(ray_address="10.1.2.3:6379").ray_address == "10.1.2.3:6379"
    env = settings.worker_env()
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000" and env["TOY_X"] == "1"
    assert env["REPRO_DATA_ROOT"] == "s3://b/data" and "PYTHONPATH" in env
    assert not {"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "MLFLOW_TRACKING_PASSWORD"} & set(env)
    assert "MLFLOW_TRACKING_URI" not in env                 # workers never write to MLflow
    monkeypatch.setenv("REPRO_RAY_FORWARD_ENV", "TOY_X,MY_URI,GITHUB_TOKEN")
    monkeypatch.setenv("MY_URI", "https://user:pass@tracking.example.org")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_x")
    env = ScaleOut.from_env().worker_env()
    assert env["TOY_X"] == "1" and "MY_URI" not in env and "GITHUB_TOKEN" not in env
    assert "pass@" not in " ".join(env.values())
    assert driver_host(settings) == "127.0.0.1"            # a cluster on this machine
    assert driver_host(ScaleOut(ray_address="10.1.2.3:6379", driver_host="10.9.9.9")) == "10.9.9.9"
