"""Same params + seed -> byte-identical metrics files, whatever the executor.

Fan-out items run side by side: under the local executor each instance has a worker process
to itself, under Ray a Ray worker; either way its global RNGs and thread count are its own.
Each case runs a fan-out stage twice under ``threads`` and once under ``ray`` and compares the
metrics files byte for byte.
"""
from __future__ import annotations

import os

import pytest

from flows.runtime import runner
from flows.runtime.testing import make_project


@pytest.fixture(scope="module", autouse=True)
def _rng_flow_registered():
    with pytest.MonkeyPatch.context() as patch:  # workers and Ray inherit the environment
        patch.setenv("REPRO_EXTRA_FLOWS", f"{os.environ['REPRO_EXTRA_FLOWS']},tests.runtime.rng_flow")
        yield


def metrics_bytes(project, method: str, stage: str) -> dict[str, bytes]:
    folder = project.method_dir(method) / "metrics" / stage
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.json"))}


def runs(project, method: str, stage: str, profile: str, overrides: dict | None = None,
         executors: tuple[str, ...] = ("threads", "threads", "ray")) -> list[dict[str, bytes]]:
    """The stage's metrics after a first run and forced re-runs, one per executor listed."""
    only = frozenset({stage})
    seen = []
    for i, executor in enumerate(executors):
        selection = runner.Selection(only=only, force=only if i else frozenset())
        runner.run([method], profile=profile, selection=selection, executor=executor, project=project,
                   overrides=overrides)
        seen.append(metrics_bytes(project, method, stage))
    return seen


def test_parallel_torch_items_are_byte_identical_across_runs_and_executors(tmp_path):
    project = make_project(tmp_path / "proj", ["rng_flow"])
    first, second, on_ray = runs(project, "rng_flow", "fit", "small")
    assert sorted(first) == ["0.json", "1.json", "2.json"]
    assert first == second == on_ray
    assert len(set(first.values())) == 3            # the seeds do differ from one another
    assert b'"torch_threads": 1' in first["0.json"]  # the declared num_cpus held, in every item


@pytest.mark.slow   # CI time: the synthetic torch fan-out above covers threads vs Ray in CI
def test_a_real_methods_fanout_stage_is_byte_identical(tmp_path):
    """linrnn's PPO fan-out (torch; 2 variants x 2 seeds at smoke) under both executors. (The
    re-run under the same executor is the synthetic test's; one run each keeps CI short.)"""
    project = make_project(tmp_path / "proj", ["linrnn"])
    first, on_ray = runs(project, "linrnn", "train_ringworld", "smoke", {"seeds": [0, 1]},
                         executors=("threads", "ray"))
    assert len(first) == 4
    assert first == on_ray
