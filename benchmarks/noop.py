"""No-op `repro run METHOD` vs no-op `dvc repro` of the same pipeline (target ratio <= 2.5)."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _common import BIN, median_of

from flows.runtime.testing import run_in_temp_project


def main(method: str = "linrnn", repeats: int = 5) -> None:
    root = Path(tempfile.mkdtemp()) / "proj"
    run_in_temp_project(method, root, profile="smoke")          # bring it up to date once
    env = {"REPRO_ROOT": str(root)}
    ours = median_of([str(BIN / "repro"), "run", method, "--profile", "smoke"], root, repeats, env)
    dvc = median_of([str(BIN / "dvc"), "repro", f"data/{method}/dvc.yaml"], root, repeats)
    dvc_all = median_of([str(BIN / "dvc"), "repro", "-P"], root, repeats)
    print(f"no-op repro run {method}: {ours:.2f}s   no-op dvc repro (its pipeline): {dvc:.2f}s   "
          f"dvc repro -P: {dvc_all:.2f}s   ratio {ours / dvc:.2f}x (median of {repeats})")


if __name__ == "__main__":
    main(*sys.argv[1:2])
