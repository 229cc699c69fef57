"""Runtime against real services: an `mlflow server` on 127.0.0.1, the Ray executor, the CLI."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from flows.runtime.testing import make_project, run_in_temp_project
from tests.runtime.browser import browser  # noqa: F401  (a fixture)

M = "toy_flow"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--default-artifact-root", str(tmp_path / "artifacts"), "--workers", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("mlflow server did not start")
    yield url
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)


def rest(url: str, path: str, body: dict | None = None, query: str = "") -> dict:
    """MLflow's REST API: GET with a query string, or POST with a JSON body."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}{query}", data=data,
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=30).read())


def test_runs_are_recorded_in_a_tracking_server(mlflow_server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    result = run_in_temp_project(M, tmp_path / "proj")
    assert not (result.project.root / "mlflow.db").exists()       # the server replaced sqlite
    experiment = rest(mlflow_server, "experiments/get-by-name", query=f"?experiment_name={M}")["experiment"]
    runs = rest(mlflow_server, "runs/search", {"experiment_ids": [experiment["experiment_id"]]})["runs"]
    names = sorted(r["info"]["run_name"] for r in runs)
    assert names == sorted([f"{M} make_data [smoke]", f"{M} square seed=0 [smoke]",
                            f"{M} square seed=1 [smoke]", f"{M} total [smoke]", f"{M}-smoke"])
    total = next(r for r in runs if r["info"]["run_name"] == f"{M} total [smoke]")
    assert {"key": "total", "value": 25.0} in [{k: m[k] for k in ("key", "value")}
                                               for m in total["data"]["metrics"]]


def test_ray_executor_runs_two_methods_on_one_ray_and_one_prefect_server(tmp_path, monkeypatch):
    """`repro run A B --executor ray`: fan-out on Ray, one `ray.init` and one temporary Prefect
    server for the whole invocation (not one per method), both stopped at its end."""
    import ray
    from prefect.server.api import server as server_mod

    from flows.runtime import runner

    monkeypatch.setenv("REPRO_EXTRA_FLOWS", f"{os.environ['REPRO_EXTRA_FLOWS']},tests.runtime.rng_flow")
    inits, servers = [], []
    real_init, real_start = ray.init, server_mod.SubprocessASGIServer.start
    monkeypatch.setattr(ray, "init", lambda *a, **k: inits.append(a) or real_init(*a, **k))
    monkeypatch.setattr(server_mod.SubprocessASGIServer, "start",
                        lambda self, *a, **k: servers.append(self) or real_start(self, *a, **k))
    project = make_project(tmp_path / "proj", [M, "rng_flow"])
    toy, rng = runner.run([M, "rng_flow"], profile="smoke", executor="ray", project=project)
    assert sorted(toy.executed) == ["make_data", "square@0", "square@1", "total"]
    assert rng.executed
    assert json.loads(project.metrics_file(M, "total").read_text())["total"] == 25.0
    assert len(inits) == 1 and len(servers) == 1
    assert not ray.is_initialized()


def repro(*args: str, root=None, check=True) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"REPRO_ROOT": str(root)} if root else {})}
    done = subprocess.run([sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, env=env)
    if check:
        assert done.returncode == 0, done.stderr + done.stdout
    return done


def test_cli_status_compare_and_errors(tmp_path):
    project = make_project(tmp_path / "proj", [M])
    assert "resum" in repro("--help").stdout
    assert "toy_flow" in repro("list").stdout
    bad = repro("run", M, "--profile", "smoke", "--set", "data.n=lots", root=project.root, check=False)
    assert bad.returncode != 0 and "data.n" in bad.stderr
    assert not (project.root / "data" / M / "params.yaml").exists()      # nothing written
    first = repro("run", M, "--profile", "smoke", root=project.root)
    assert "executed 4 stage(s)" in first.stdout
    again = repro("run", M, "--profile", "smoke", root=project.root)
    assert "executed 0 stages" in again.stdout
    status = repro("status", M, root=project.root).stdout
    assert status.count("up to date") == 4
    (project.root / "data" / M / "params.yaml").write_text(
        (project.root / "data" / M / "params.yaml").read_text().replace("n: 3", "n: 4"))
    stale = repro("status", M, root=project.root).stdout
    assert "stale" in stale and "params: data" in stale
    compare = repro("compare", M, root=project.root).stdout
    assert "1 run(s)" in compare and "total/total" in compare


def test_repro_ui_stopped_by_ctrl_c_leaves_no_process(tmp_path):
    """`repro ui` runs `mlflow ui` (and its uvicorn worker) in a process group of its own and
    stops the whole group; SIGTERM is checked where the browser test stops it."""
    import signal

    from tests.runtime.cluster import _http_ok, wait_until
    from tests.runtime.test_records import alive, descendants

    project = make_project(tmp_path / "proj", [M])
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "ui", "--port", str(port), "--prefect-port", "0"],
                            env={**os.environ, "REPRO_ROOT": str(project.root)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: _http_ok(f"http://127.0.0.1:{port}/health"), 240, "repro ui", proc)
    spawned = descendants(proc.pid)
    assert len(spawned) >= 2                                  # mlflow ui and uvicorn
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 128 + signal.SIGINT
    time.sleep(1)
    assert not alive(spawned), f"left running: {alive(spawned)}"


def test_repro_ui_creates_the_tracking_store_before_it_starts_a_server(tmp_path, monkeypatch):
    """Regression: `mlflow ui` migrating a fresh mlflow.db while a `repro run` opened it failed
    the run with "duplicate column name"; `repro ui` now creates the store first."""
    import sqlite3

    from flows import cli
    from flows.runtime import processes

    project = make_project(tmp_path / "proj", [M])
    monkeypatch.setenv("REPRO_ROOT", str(project.root))
    db = project.root / "mlflow.db"
    assert not db.exists()

    class Started(Exception):
        pass

    def first_server(command, **kwargs):
        with sqlite3.connect(db) as con:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master")}
        raise Started(tables)

    monkeypatch.setattr(processes, "start_group", first_server)
    with pytest.raises(Started) as started:
        cli.main(["ui", "--port", "1", "--prefect-port", "0"])
    assert {"alembic_version", "experiments", "runs"} <= started.value.args[0]


def prefect_api(api: str, path: str) -> list[dict]:
    request = urllib.request.Request(f"{api}/{path}", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=30).read())


def test_repro_run_shows_in_the_prefect_ui_of_repro_ui(tmp_path, monkeypatch, browser):
    """`repro ui` starts a Prefect server too; a run then shows up there (one COMPLETED task run
    per stage instance), starts no temporary server, and its flow-run page renders in Chromium."""
    import signal

    from playwright.sync_api import expect
    from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

    from tests.runtime.browser import ARTIFACTS
    from tests.runtime.cluster import _http_ok, wait_until

    project = make_project(tmp_path / "proj", [M])
    port, prefect_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "ui", "--port", str(port),
                             "--prefect-port", str(prefect_port)],
                            env={**os.environ, "REPRO_ROOT": str(project.root)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ui = f"http://127.0.0.1:{prefect_port}"
    api = f"{ui}/api"
    try:
        wait_until(lambda: _http_ok(f"{api}/health"), 240, "repro ui's Prefect server", proc)
        started = []
        from prefect.server.api import server as server_mod

        monkeypatch.setattr(server_mod.SubprocessASGIServer, "start",
                            lambda self, *a, **k: started.append(self) or pytest.fail("temporary server"))
        with temporary_settings({PREFECT_LOGGING_TO_API_ENABLED: True}):  # tests turn it off
            result = run_in_temp_project(M, project.root)
        assert not started
        task_runs = prefect_api(api, "task_runs/filter")
        assert sorted(r["name"] for r in task_runs) == sorted(result.executed)
        assert {r["state_type"] for r in task_runs} == {"COMPLETED"}
        (flow_run,) = prefect_api(api, "flow_runs/filter")
        assert flow_run["state_type"] == "COMPLETED"
        logs = prefect_api(api, "logs/filter")
        assert any(log["flow_run_id"] == flow_run["id"] for log in logs), "no logs reached the server"
        artifacts = prefect_api(api, "artifacts/filter")
        assert any(a["type"] == "progress" and a["data"] == 100.0 for a in artifacts), artifacts

        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{ui}/runs/flow-run/{flow_run['id']}")
        expect(page.get_by_text(flow_run["name"]).first).to_be_visible(timeout=90_000)
        expect(page.get_by_text("Completed").first).to_be_visible(timeout=90_000)
        page.screenshot(path=str(ARTIFACTS / "prefect-flow-run.png"), full_page=True)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert not (project.root / ".prefect" / "server.json").exists()
    assert (project.root / ".prefect" / "server.db").is_file()   # its database is the workspace's
