"""DVC's own commands see every method's pipeline in a fresh copy of the real repository.

A fresh clone holds the tracked files only (no stage outputs). DVC must collect every
``data/<m>/dvc.yaml`` (an ignore pattern that DVC reads as "this folder is git-ignored" hides
them, and ``git check-ignore`` does not show it), link each method's stages to the root
``metrics_index`` stage, and plan them. DVC 3.67 cannot dry-run a stage whose inputs are
absent (it hashes them: treeverse/dvc#9021), so the whole-project dry run of a fresh clone
is ``--force`` (every stage runs, as it must without data) and the plain dry run is checked
on a stage whose inputs are present.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.runtime import registry
from flows.runtime.testing import REPO_ROOT


def real_methods(monkeypatch):
    monkeypatch.delenv("REPRO_EXTRA_FLOWS", raising=False)
    return registry.all_methods()


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The working tree's tracked files (what a clone of this commit holds), in a new git repo."""
    root = tmp_path_factory.mktemp("fresh-clone")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO_ROOT / rel
        if src.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True)
    return root


def dvc(root: Path, *args: str) -> str:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": path})
    assert done.returncode == 0, f"dvc {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def instances(root: Path, method) -> set[str]:
    params = yaml.safe_load((root / "data" / method.name / "params.yaml").read_text())
    names = set()
    for stage in method.stages:
        keys = params.get("fanout", {}).get(stage.name, {}) if stage.fan_out else [None]
        names |= {f"data/{method.name}/dvc.yaml:{stage.name}" + (f"@{k}" if k else "") for k in keys}
    return names


def test_stage_list_and_dag_see_every_method(clone, monkeypatch):
    methods = real_methods(monkeypatch)
    listed = {line.split()[0] for line in dvc(clone, "stage", "list", "--all").splitlines() if line.strip()}
    expected = {"metrics_index"}.union(*(instances(clone, m) for m in methods))
    assert listed == expected
    edges = [line for line in dvc(clone, "dag", "--dot").splitlines() if "->" in line]
    for method in methods:
        ours = [e for e in edges if f'"data/{method.name}/dvc.yaml:' in e]
        assert any(e.endswith('-> "metrics_index";') for e in ours), method.name
        if any(stage.deps for stage in method.stages):
            assert any(e.count(f"data/{method.name}/dvc.yaml:") == 2 for e in ours), method.name


@pytest.mark.slow   # CI time (46 s); the layout and DAG checks of the same clone stay in CI
def test_status_and_dry_runs_work(clone):
    assert "changed outs" in dvc(clone, "status", "data/linrnn/dvc.yaml")
    planned = dvc(clone, "repro", "--dry", "data/linrnn/dvc.yaml:verify_exact")
    assert "repro exec linrnn verify_exact" in planned
    everything = dvc(clone, "repro", "-P", "--dry", "--force")
    running = [line for line in everything.splitlines() if line.startswith("Running stage")]
    assert running[-1] == "Running stage 'metrics_index':"   # after every method's stages
    assert len(running) == len(dvc(clone, "stage", "list", "--all").splitlines())
