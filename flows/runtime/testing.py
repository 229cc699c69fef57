"""Throw-away projects for tests: run a method end to end without touching the checkout.

A temp project is a git + DVC repo holding a copy of the method's code paths (so DVC can
hash them) plus its own params, data, tracking store and Prefect home.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import flows
from flows.runtime import registry
from flows.runtime.project import DEFAULT_SETTINGS, Project, set_offline_env

REPO_ROOT = Path(flows.__file__).resolve().parents[1]
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def make_project(root: Path, methods: list[str], settings: dict[str, Any] | None = None) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    for name in methods:
        for rel in registry.get(name).all_code_paths():
            src, dst = REPO_ROOT / rel, root / rel
            if dst.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=_IGNORE)
            else:
                shutil.copy2(src, dst)
    project = Project(root)
    if (root / ".dvc").is_dir():  # an existing temp project: it now holds these methods too
        return project
    shutil.copy2(REPO_ROOT / ".dvcignore", root / ".dvcignore")
    (root / "params.yaml").write_text(yaml.safe_dump({**DEFAULT_SETTINGS, **(settings or {})}))
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    set_offline_env(project)
    from dvc.repo import Repo

    repo = Repo.init(str(root))
    with repo.config.edit() as conf:
        conf["core"]["autostage"] = False
    repo.close()
    return project


@dataclass
class RunResult:
    project: Project
    outcomes: list

    @property
    def executed(self) -> list[str]:
        return [name for o in self.outcomes for name in o.executed]

    def metrics(self, method: str, stage: str, item_key: str | None = None) -> dict[str, Any]:
        from components.common.io import read_json

        return read_json(self.project.metrics_file(method, stage, item_key))

    def out(self, method: str, stage: str, item_key: str | None = None) -> Path:
        return self.project.stage_out(method, stage, item_key)


def run_in_temp_project(method: str, root: Path, profile: str = "smoke", executor: str = "threads",
                        **kwargs: Any) -> RunResult:
    """Make a temp project at ``root`` (if needed) and ``repro run`` the method in it."""
    from flows.runtime import runner

    project = Project(root) if (root / ".dvc").is_dir() else make_project(root, [method])
    outcomes = runner.run([method], profile=profile, executor=executor, project=project, **kwargs)
    return RunResult(project, outcomes)
