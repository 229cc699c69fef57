"""One fan-out stage three ways on this machine: sequential `repro exec` per item, the thread
executor, and Ray (in-process local cluster). Wall time of the stage alone, from the runs."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from _common import BIN, timed

from flows.runtime import registry, runner
from flows.runtime.testing import run_in_temp_project


def main(method: str = "linrnn", stage: str = "train_ringworld", profile: str = "smoke") -> None:
    root = Path(tempfile.mkdtemp()) / "proj"
    result = run_in_temp_project(method, root, profile=profile)
    keys = [n.split("@")[1] for n in result.executed if n.startswith(f"{stage}@")]
    env = {"REPRO_ROOT": str(root)}
    sequential = sum(timed([str(BIN / "repro"), "exec", method, stage, "--item", k], root, env) for k in keys)
    walls = {"sequential (repro exec per item)": sequential}
    for executor in ("threads", "ray"):
        start = time.perf_counter()
        run_in_temp_project(method, root, profile=profile, executor=executor,
                            selection=runner.Selection(only=frozenset({stage}), force=frozenset({stage})))
        walls[f"{executor} (whole repro run)"] = time.perf_counter() - start
    for name, wall in walls.items():
        print(f"{stage} x{len(keys)} {name}: {wall:.1f}s  ({wall / sequential:.2f}x sequential)")


if __name__ == "__main__":
    main(*sys.argv[1:4])
