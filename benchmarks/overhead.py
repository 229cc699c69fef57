"""Orchestration overhead of the last tracked run of a method (from its MLflow records).

overhead = wall time of the parent run - critical path through the DAG of the child runs'
compute times. Reported per executed stage and as a share of total stage compute.
"""
from __future__ import annotations

import sys
from collections import defaultdict

from flows.runtime import registry
from flows.runtime.dag import Method
from flows.runtime.project import Project


def compute_by_stage(children) -> dict[str, list[float]]:
    """Seconds of each child run, grouped by its stage. The run names are readable labels
    (``linrnn train_ringworld variant=alf seed=0 [small]``); the ``stage`` tag is the key."""
    out: dict[str, list[float]] = defaultdict(list)
    for run in children:
        out[run.data.tags["stage"]].append((run.info.end_time - run.info.start_time) / 1000)
    return dict(out)


def critical_path(method: Method, compute: dict[str, list[float]]) -> float:
    """Longest path of compute through the DAG: a stage starts when all its upstream finished,
    and its instances (fan-out items) run side by side. Stages that did not run take 0 s."""
    finish: dict[str, float] = {}
    for stage in method.stages:  # declaration order is topological
        start = max((finish[d] for d in stage.deps if d in finish), default=0.0)
        finish[stage.name] = start + max(compute.get(stage.name, [0.0]))
    return max(finish.values(), default=0.0)


def main(method_name: str = "linrnn") -> None:
    from _common import newest_run_tree  # a sibling script: on sys.path when run as one

    project = Project.find()
    parent, children = newest_run_tree(project, method_name,
                                       lambda run: int(run.data.tags.get("executed", 0)))
    compute = compute_by_stage(children)
    method = registry.get(method_name)
    wall = (parent.info.end_time - parent.info.start_time) / 1000
    total = sum(sum(times) for times in compute.values())
    workers = int(parent.data.params.get("workers", 2))
    # no schedule can beat the critical path nor total compute spread over the workers
    lower_bound = max(critical_path(method, compute), total / workers)
    startup = (min(r.info.start_time for r in children) - parent.info.start_time) / 1000
    teardown = (parent.info.end_time - max(r.info.end_time for r in children)) / 1000
    overhead = wall - lower_bound
    in_flight = overhead - startup - teardown
    print(f"{method_name}: run {parent.info.run_id[:8]} wall {wall:.1f}s; stage compute {total:.1f}s over "
          f"{len(children)} stage instances; best possible schedule on {workers} workers {lower_bound:.1f}s")
    print(f"  overhead {overhead:.1f}s ({100 * overhead / total:.1f}% of compute): start-up (Prefect API, "
          f"flow start) {startup:.1f}s, teardown {teardown:.1f}s, between stages {in_flight:.1f}s = "
          f"{in_flight / len(children):.2f}s per instance ({100 * in_flight / total:.1f}% of compute)")


if __name__ == "__main__":
    main(*sys.argv[1:2])
