"""Run any method's paper profile end to end in a temp project (git + DVC + Prefect + MLflow),
against tiny checkpoints and a tiny dataset in the paper's layout, with ``--set`` pairs that
point the ``paper.*`` keys at them and shrink steps. Marker: ``paper_shape``."""
from __future__ import annotations

from pathlib import Path

from flows.cli import parse_overrides
from flows.runtime.testing import RunResult, run_in_temp_project


def run_paper_shape(method: str, root: Path, sets: list[str], executor: str = "threads") -> RunResult:
    """``repro run METHOD --profile paper --set K=V ...`` in a fresh project under ``root``."""
    return run_in_temp_project(method, Path(root), profile="paper", executor=executor,
                               overrides=parse_overrides(sets, None))
