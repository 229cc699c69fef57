"""Where things live in a project checkout, and the environment every entry point sets.

A project root is a folder with ``.dvc/`` and the root ``params.yaml``. The code is the
installed package; the root holds data, pipeline files and the tracking store. Tests make
throw-away roots with ``flows.runtime.testing``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from components.common.config import PROFILES

# Offline, quiet, and state kept inside the project: set before prefect/mlflow/ray/dvc import.
OFFLINE_ENV = {
    "DVC_NO_ANALYTICS": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_LOGGING_TO_API_BATCH_INTERVAL": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

EXECUTORS = ("threads", "ray")
CODE_DEPS = ("folders", "imports")

DEFAULT_SETTINGS = {
    "profile": "small",          # default profile of `repro run`
    "executor": "threads",       # threads | ray
    # imports: a stage's code deps are the components/ files it imports (transitively) and
    # flows/<m>.py, so editing one common module stales only the stages that import it;
    # folders: the whole of components/<m> and components/common. Switching rewrites every
    # dvc.yaml (`repro gen`), and DVC then sees every stage's deps as changed once.
    "code_deps": "imports",
}


@dataclass(frozen=True)
class Project:
    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> "Project":
        env = os.environ.get("REPRO_ROOT")
        if env:
            return cls(Path(env).resolve())
        here = (start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / ".dvc").is_dir() and (folder / "params.yaml").is_file():
                return cls(folder)
        raise SystemExit(
            f"no icml26-repro project found at or above {here} (looked for .dvc/ and params.yaml); "
            "run from the repository, or set REPRO_ROOT"
        )

    def method_dir(self, method: str) -> Path:
        return self.root / "data" / method

    def pipeline_file(self, method: str) -> Path:
        return self.method_dir(method) / "dvc.yaml"

    def params_file(self, method: str) -> Path:
        return self.method_dir(method) / "params.yaml"

    def stage_out(self, method: str, stage: str, item_key: str | None = None) -> Path:
        out = self.method_dir(method) / stage
        return out / item_key if item_key else out

    def metrics_file(self, method: str, stage: str, item_key: str | None = None) -> Path:
        base = self.method_dir(method) / "metrics"
        return base / stage / f"{item_key}.json" if item_key else base / f"{stage}.json"

    @property
    def tracking_uri(self) -> str:
        return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self.root / 'mlflow.db'}"

    @property
    def artifact_root(self) -> str:
        return (self.root / "mlartifacts").as_uri()

    def settings(self) -> dict:
        path = self.root / "params.yaml"
        values = yaml.safe_load(path.read_text()) or {}
        if not isinstance(values, dict):
            raise SystemExit(f"[repro] {path}: expected settings as 'key: value' lines")
        unknown = set(values) - set(DEFAULT_SETTINGS)
        if unknown:
            raise SystemExit(f"[repro] {path}: unknown setting(s) {sorted(unknown)}; known: {sorted(DEFAULT_SETTINGS)}")
        settings = {**DEFAULT_SETTINGS, **values}
        for key, allowed in (("profile", PROFILES), ("executor", EXECUTORS), ("code_deps", CODE_DEPS)):
            if settings[key] not in allowed:
                raise SystemExit(f"[repro] {path}: {key}: {settings[key]!r} is not one of {', '.join(allowed)}")
        return settings


def set_offline_env(project: Project | None = None) -> None:
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    if project is not None:
        os.environ.setdefault("PREFECT_HOME", str(project.root / ".prefect"))
        os.environ.setdefault("DVC_SITE_CACHE_DIR", str(project.root / ".dvc" / "site-cache"))
