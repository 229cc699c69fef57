"""Real services for scale-out tests, all on loopback, started and stopped by the tests:
a moto S3 server, an `mlflow server` (sqlite backend, artifacts proxied to S3) and a Ray
cluster of `ray start` nodes, each on its own loopback address (127.x.y.2 head, .3 worker)
so that Ray sees distinct node IPs, and each with its own TMPDIR (node-local scratch).

Ray's `ray start` turns 127.0.0.1 into the machine's network address; other 127.x
addresses are kept as given, which keeps all traffic on loopback.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
          "AWS_DEFAULT_REGION": "us-east-1"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until(check, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: process exited with {proc.returncode}")
        time.sleep(0.5)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s")


def _http_ok(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
        return True
    except OSError:
        return False


def stop_group(proc: subprocess.Popen, grace: float = 8) -> None:
    """TERM the process group we started (it may outlive its leader), then KILL what is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    time.sleep(1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


@dataclass
class S3Server:
    url: str
    proc: subprocess.Popen
    bucket: str = "repro"

    @classmethod
    def start(cls, workdir: Path) -> "S3Server":
        port = free_port()
        proc = _spawn([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                      {**os.environ, **S3_ENV}, workdir / "moto.log")
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _http_ok(f"{url}/moto-api/"), 120, "moto server", proc)
        server = cls(url, proc)
        server.fs().mkdir(server.bucket)
        return server

    @property
    def env(self) -> dict[str, str]:
        """What every process touching the store gets: credentials and endpoint, env only."""
        return {**S3_ENV, "AWS_ENDPOINT_URL": self.url}

    def fs(self):
        import s3fs

        return s3fs.S3FileSystem(key=S3_ENV["AWS_ACCESS_KEY_ID"], secret=S3_ENV["AWS_SECRET_ACCESS_KEY"],
                                 endpoint_url=self.url, skip_instance_cache=True)

    def stop(self) -> None:
        stop_group(self.proc, grace=5)


@dataclass
class MlflowServer:
    url: str
    proc: subprocess.Popen

    @classmethod
    def start(cls, workdir: Path, s3: S3Server) -> "MlflowServer":
        port = free_port()
        env = {**os.environ, **s3.env, "MLFLOW_S3_ENDPOINT_URL": s3.url,
               "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        proc = _spawn([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                       "--backend-store-uri", f"sqlite:///{workdir / 'mlflow-server.db'}",
                       "--artifacts-destination", f"s3://{s3.bucket}/mlflow", "--workers", "1"],
                      env, workdir / "mlflow.log")
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _http_ok(f"{url}/health"), 240, "mlflow server", proc)
        return cls(url, proc)

    def stop(self) -> None:
        stop_group(self.proc, grace=5)


@dataclass
class RayNode:
    ip: str
    proc: subprocess.Popen
    tmpdir: Path
    log: Path


@dataclass
class RayCluster:
    """``ray start --head`` plus ``ray start --address`` nodes, 1 CPU each."""
    root: Path
    env: dict[str, str]
    prefix: str = field(default_factory=lambda: f"127.{random.randint(1, 250)}.{random.randint(1, 250)}")
    nodes: list[RayNode] = field(default_factory=list)
    port: int = 0

    @property
    def address(self) -> str:
        return f"{self.prefix}.2:{self.port}"

    @classmethod
    def start(cls, env: dict[str, str], workers: int = 1) -> "RayCluster":
        # a short root: Ray's unix socket paths must stay under ~100 characters
        root = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
        cluster = cls(root, {**os.environ, **env, "RAY_TMPDIR": str(root), "RAY_USAGE_STATS_ENABLED": "0",
                             "RAY_AUTH_MODE": "disabled"})
        cluster.port = free_port(f"{cluster.prefix}.2")
        try:
            cluster._node(head=True)
            for _ in range(workers):
                cluster._node(head=False)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _node(self, head: bool, attempts: int = 3) -> RayNode:
        # `ray start` gives a raylet 30 s (fixed) to register; a loaded machine can miss that
        for attempt in range(1, attempts + 1):
            try:
                return self._start_node(head)
            except RuntimeError:
                if attempt == attempts:
                    raise

    def _start_node(self, head: bool) -> RayNode:
        index = len(self.nodes)
        ip = f"{self.prefix}.{index + 2}"
        name = "head" if head else f"worker{index}"
        tmpdir = self.root / f"{name}-tmp"
        tmpdir.mkdir(exist_ok=True)
        cmd = [str(BIN / "ray"), "start", "--block", "--node-ip-address", ip, "--num-cpus", "1",
               "--object-store-memory", str(100 * 1024**2), "--resources", f'{{"{name}": 1}}',
               "--disable-usage-stats"]
        if head:
            cmd += ["--head", "--port", str(self.port), "--include-dashboard", "false",
                    "--temp-dir", str(self.root)]
        else:
            cmd += ["--address", self.address]
        log = self.root / f"{name}.log"
        proc = _spawn(cmd, {**self.env, "TMPDIR": str(tmpdir)}, log)
        try:
            wait_until(lambda: "block forever" in log.read_text(), 240, f"ray node {name}", proc)
        except (RuntimeError, TimeoutError) as err:
            stop_group(proc)
            raise RuntimeError(f"{err}:\n{log.read_text()[-3000:]}") from None
        node = RayNode(ip, proc, tmpdir, log)
        self.nodes.append(node)
        return node

    def kill(self, node: RayNode) -> None:
        """A node dies: SIGKILL its `ray start` process group (raylet and its workers)."""
        os.killpg(node.proc.pid, signal.SIGKILL)
        node.proc.wait(timeout=30)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            stop_group(node.proc)
        shutil.rmtree(self.root, ignore_errors=True)
