"""``repro compare``: MLflow's own run search, shown as a table of what differs."""
from __future__ import annotations

from flows.runtime.project import Project


def compare_runs(project: Project, method: str, last: int = 10, metric_filter: str | None = None) -> str:
    import mlflow
    import pandas as pd

    mlflow.set_tracking_uri(project.tracking_uri)
    runs = mlflow.search_runs(experiment_names=[method], filter_string=f"tags.method = '{method}'",
                              order_by=["attributes.start_time DESC"], max_results=last)
    if runs.empty:
        return f"no tracked runs of {method} yet: `repro run {method}`"
    params = [c for c in runs.columns if c.startswith("params.")]
    differing = [c for c in params if runs[c].astype(str).nunique(dropna=False) > 1]
    metrics = [c for c in runs.columns if c.startswith("metrics.")
               and (metric_filter is None or metric_filter in c)]
    if metric_filter is None:  # the last stages' metrics are the headline ones
        metrics = sorted(metrics, key=lambda c: ("evaluate" not in c and "report" not in c, c))[:12]
    table = pd.DataFrame({
        "run": runs["run_id"].str[:8],
        "start": runs["start_time"].dt.strftime("%m-%d %H:%M"),
        "status": runs["status"],
        "profile": runs.get("tags.profile"),
        "git": runs.get("tags.git_sha", pd.Series(dtype=str)).astype(str).str[:7],
        "executed": runs.get("tags.executed"),
    })
    for column in differing:
        table[column.removeprefix("params.")] = runs[column]
    for column in metrics:
        table[column.removeprefix("metrics.")] = runs[column].round(4)
    header = (f"{method}: {len(runs)} run(s); params that differ: "
              f"{', '.join(c.removeprefix('params.') for c in differing) or 'none'}\n")
    return header + table.to_string(index=False)
