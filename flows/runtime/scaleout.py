"""Scale-out settings, all in one place: the environment (or the matching `repro run` options).

| variable              | what it does                                                       |
|-----------------------|--------------------------------------------------------------------|
| `REPRO_RAY_ADDRESS`   | run stages on this existing Ray cluster (`--ray-address`)           |
| `REPRO_DATA_ROOT`     | fsspec URL (`s3://bucket/data`) where stages read inputs and write   |
|                       | outputs; the driver mirrors finished outputs into its DVC workspace |
| `REPRO_DVC_REMOTE`    | DVC remote URL (`s3://bucket/dvc`); registered as remote `repro` in |
|                       | `.dvc/config.local` and pushed to (outputs + run-cache) after a run |
| `MLFLOW_TRACKING_URI` | a tracking server (`http://host:5000`) instead of `mlflow.db`       |
| `REPRO_DRIVER_HOST`   | address the workers use to reach the driver's Prefect API server    |
| `REPRO_RAY_FORWARD_ENV` | extra variable names to forward to Ray workers (comma-separated;  |
|                       | never one named like a secret or a URL with credentials)            |

Credentials are never settings: S3 access comes from the standard AWS variables
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, ...) or an instance role, in
every process that touches the store. Ray workers get only the allow-list ``FORWARD_NAMES``
(plus ``REPRO_RAY_FORWARD_ENV``): never a secret, never a URL with ``user:pass@`` in it; a
cluster's nodes carry their own credentials. The driver's Prefect API server, when workers on
other machines must reach it, listens on the one address that routes to the Ray head (never
0.0.0.0) and requires a basic-auth string generated for the run
(``PREFECT_SERVER_API_AUTH_STRING``; workers get it as ``PREFECT_API_AUTH_STRING``).
"""
from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
from dataclasses import dataclass, replace

# The only variables forwarded to Ray workers of an existing cluster (they do not inherit the
# driver's environment): an allow-list, so nothing secret travels by accident. Workers never
# write to MLflow (the driver alone does), so no tracking URI or MLflow credential goes along.
FORWARD_NAMES = (
    "REPRO_DATA_ROOT", "REPRO_EXTRA_FLOWS",
    "PREFECT_API_URL", "PREFECT_API_AUTH_STRING",   # the run's API server and its per-run auth
    "PREFECT_LOGGING_LEVEL", "PREFECT_LOGGING_TO_API_ENABLED", "PREFECT_LOGGING_TO_API_BATCH_INTERVAL",
    "PREFECT_SERVER_ANALYTICS_ENABLED", "DVC_NO_ANALYTICS", "MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK",
    "RAY_USAGE_STATS_ENABLED", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
    "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION",
)
SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "ACCESS_KEY")
_URL_CREDENTIALS = re.compile(r"://[^/@\s]+@")   # user:pass@ (or a token) inside a URL


def forwardable(name: str, value: str) -> bool:
    """Never a variable named like a secret, never a URL that carries credentials."""
    return not any(word in name.upper() for word in SECRET_WORDS) and not _URL_CREDENTIALS.search(value)


@dataclass(frozen=True)
class ScaleOut:
    ray_address: str | None = None
    data_root: str | None = None
    dvc_remote: str | None = None
    tracking_uri: str | None = None
    driver_host: str | None = None
    forward_env: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, **overrides: str | None) -> "ScaleOut":
        env = os.environ
        found = cls(
            ray_address=env.get("REPRO_RAY_ADDRESS") or None,
            data_root=(env.get("REPRO_DATA_ROOT") or "").rstrip("/") or None,
            dvc_remote=env.get("REPRO_DVC_REMOTE") or None,
            tracking_uri=env.get("MLFLOW_TRACKING_URI") or None,
            driver_host=env.get("REPRO_DRIVER_HOST") or None,
            forward_env=tuple(n for n in env.get("REPRO_RAY_FORWARD_ENV", "").split(",") if n),
        )
        given = {k: (v.rstrip("/") if k == "data_root" else v) for k, v in overrides.items() if v}
        return replace(found, **given)

    def worker_env(self) -> dict[str, str]:
        """The environment a Ray worker of an existing cluster needs: how to import the code
        (the driver's sys.path: every node runs the same checkout and venv at the same path),
        the Prefect API, the tracking URI, the data root and the offline switches."""
        names = (*FORWARD_NAMES, *self.forward_env)
        env = {k: os.environ[k] for k in names if k in os.environ
               and (k == "PREFECT_API_AUTH_STRING" or forwardable(k, os.environ[k]))}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        if self.data_root:
            env["REPRO_DATA_ROOT"] = self.data_root
        return env


def ray_host(address: str) -> str:
    """The host part of a Ray address (``host:port``, ``ray://host:port``)."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0]
    return host.strip("[]")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def driver_host(settings: ScaleOut) -> str:
    """Where Ray workers reach this process (its Prefect API server): the explicit setting,
    loopback for a cluster on this machine, else the local address that routes to the head
    (a UDP socket's connect sends nothing)."""
    if settings.driver_host:
        return settings.driver_host
    if not settings.ray_address or settings.ray_address == "auto":
        return "127.0.0.1"
    head = ray_host(settings.ray_address)
    if is_loopback(head):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((head, 9))
        return probe.getsockname()[0]
