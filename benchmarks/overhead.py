"""Orchestration overhead of the last tracked run of a method (from its MLflow records).

overhead = wall time of the parent run - critical path through the DAG of the child runs'
compute times. Reported per executed stage and as a share of total stage compute.
"""
from __future__ import annotations

import sys

from flows.runtime import registry
from flows.runtime.project import Project


def main(method_name: str = "linrnn") -> None:
    from mlflow import MlflowClient

    project = Project.find()
    client = MlflowClient(project.tracking_uri)
    exp = client.get_experiment_by_name(method_name)
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=500)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags and int(r.data.tags.get("executed", 0)))
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    compute = {r.data.tags["mlflow.runName"]: (r.info.end_time - r.info.start_time) / 1000 for r in children}
    method = registry.get(method_name)
    finish: dict[str, float] = {}
    for stage in method.stages:  # longest path: a stage starts when all its upstream finished
        start = max((finish[d] for d in stage.deps if d in finish), default=0.0)
        mine = [t for name, t in compute.items() if name.split("@")[0] == stage.name]
        if mine:
            finish[stage.name] = start + max(mine)
        elif stage.deps:
            finish[stage.name] = start
    wall = (parent.info.end_time - parent.info.start_time) / 1000
    total = sum(compute.values())
    workers = int(parent.data.params.get("workers", 2))
    # no schedule can beat the critical path nor total compute spread over the workers
    lower_bound = max(max(finish.values()), total / workers)
    startup = (min(r.info.start_time for r in children) - parent.info.start_time) / 1000
    teardown = (parent.info.end_time - max(r.info.end_time for r in children)) / 1000
    overhead = wall - lower_bound
    in_flight = overhead - startup - teardown
    print(f"{method_name}: run {parent.info.run_id[:8]} wall {wall:.1f}s; stage compute {total:.1f}s over "
          f"{len(compute)} stages; best possible schedule on {workers} workers {lower_bound:.1f}s")
    print(f"  overhead {overhead:.1f}s ({100 * overhead / total:.1f}% of compute): start-up (Prefect API, "
          f"flow start) {startup:.1f}s, teardown {teardown:.1f}s, between stages {in_flight:.1f}s = "
          f"{in_flight / len(compute):.2f}s per stage ({100 * in_flight / total:.1f}% of compute)")


if __name__ == "__main__":
    main(*sys.argv[1:2])
