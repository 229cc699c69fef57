"""Planning cost on an up-to-date project: `repro status METHOD` and a no-op `repro run METHOD`
against `dvc status` and a no-op `dvc repro` of the same pipeline file (target: <= 1.5x
`dvc status`). Pass a project root that is already up to date to time it as it stands;
otherwise a temp project is brought up to date with the profile (default smoke) first."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _common import BIN, median_of

from flows.runtime.testing import run_in_temp_project


def main(method: str = "linrnn", root: str | None = None, profile: str = "smoke", repeats: int = 5) -> None:
    if root is None:
        project_root = Path(tempfile.mkdtemp()) / "proj"
        run_in_temp_project(method, project_root, profile=profile)   # bring it up to date once
    else:
        project_root = Path(root)
    env = {"REPRO_ROOT": str(project_root)}
    pipeline = f"data/{method}/dvc.yaml"
    status = median_of([str(BIN / "repro"), "status", method], project_root, repeats, env)
    run = median_of([str(BIN / "repro"), "run", method, "--profile", profile], project_root, repeats, env)
    dvc_status = median_of([str(BIN / "dvc"), "status", pipeline], project_root, repeats)
    dvc_repro = median_of([str(BIN / "dvc"), "repro", pipeline], project_root, repeats)
    print(f"{method} (median of {repeats}): repro status {status:.2f}s, no-op repro run {run:.2f}s; "
          f"dvc status {dvc_status:.2f}s, no-op dvc repro {dvc_repro:.2f}s")
    print(f"  ratios to dvc status: repro status {status / dvc_status:.2f}x, "
          f"no-op repro run {run / dvc_status:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main(*sys.argv[1:4])
