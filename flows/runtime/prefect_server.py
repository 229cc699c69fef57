"""The persistent local Prefect server that ``repro ui`` starts, and how ``repro run`` finds it.

``repro ui`` runs ``prefect server start`` on 127.0.0.1 (its database ``.prefect/server.db`` in
the workspace) and writes its API URL to ``.prefect/server.json``; ``repro run`` uses that
server while it answers, so flow runs stay visible in the Prefect UI and no temporary server is
started. When it does not answer, the run starts its temporary server as before.
"""
from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

from flows.runtime.project import Project


def record_file(project: Project) -> Path:
    return project.root / ".prefect" / "server.json"


def reachable(api_url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, ValueError):
        return False


def persistent_api_url(project: Project) -> str | None:
    """The API URL of the project's ``repro ui`` Prefect server, if it answers now."""
    path = record_file(project)
    try:
        url = json.loads(path.read_text())["api_url"]
    except (OSError, ValueError, KeyError):
        return None
    return url if reachable(url) else None


def write_record(project: Project, api_url: str) -> None:
    path = record_file(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"api_url": api_url, "pid": os.getpid()}))


def server_command(python: str, port: int) -> list[str]:
    return [python, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port),
            "--analytics-off", "--no-background"]


def database_file(project: Project) -> Path:
    return project.root / ".prefect" / "server.db"


def server_env(environ, api_url: str, project: Project) -> dict[str, str]:
    """The server's environment: no outer ``PREFECT_API_URL``; its own database in the
    workspace (not the temporary servers' one under ``PREFECT_HOME``); and the UI pointed at
    this server's API (left alone, the UI's pages call the default port 4200 whatever
    ``--port`` says)."""
    env = {k: v for k, v in environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_UI_API_URL"] = api_url
    env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{database_file(project)}"
    return env
