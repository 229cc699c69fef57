"""``repro compare``: runs of a method side by side — the params that differ and the key metrics.

Runs are MLflow's own records (parent runs, one per ``repro run``); any two or more can be
compared, whatever their profile or git revision. Key metrics are the ones the method's
CLAIMS.md criteria name (a fan-out metric shows its mean over items).
"""
from __future__ import annotations

from flows.runtime.project import Project


def compare_runs(project: Project, method: str, last: int = 10, metric_filter: str | None = None,
                 run_ids: list[str] | None = None) -> str:
    from flows.runtime.tracking import search_runs_frame

    runs = search_runs_frame(project.tracking_uri, experiment_names=[method],
                             filter_string=f"tags.method = '{method}'",
                             order_by=["attributes.start_time DESC"], max_results=50_000)
    if "tags.mlflow.parentRunId" in runs.columns:   # stage runs carry the method tag too
        runs = runs[runs["tags.mlflow.parentRunId"].isna()]
    if run_ids:
        runs = _select(runs, run_ids, method)
    else:
        runs = runs.head(last)
    if runs.empty:
        return f"no tracked runs of {method} yet: `repro run {method}`"
    return _table(project, method, runs, metric_filter)


def _select(runs, run_ids: list[str], method: str):
    chosen = []
    for wanted in run_ids:
        hits = runs[runs["run_id"].str.startswith(wanted)]
        if len(hits) != 1:
            raise SystemExit(f"run id {wanted!r} matches {len(hits)} runs of {method} "
                             f"(give a longer prefix; `repro compare {method}` lists them)")
        chosen.append(hits.index[0])
    return runs.loc[chosen]


def key_metric_columns(project: Project, method: str, runs) -> dict[str, object]:
    """Criterion metric -> per-run value (fan-out metrics averaged over their items), and the
    run's verdict (the scorecard's judging: a failed premise makes the claims inconclusive)."""
    from flows.runtime import registry
    from flows.runtime.claims import load_claims
    from flows.runtime.results import judge, overall, summarize_metric, values_from_run_metrics

    claims = load_claims(project.root, method)
    if claims is None or method not in registry.method_names():
        return {}
    declared = registry.get(method)
    keys = [c.metric for c in claims.criteria] + [m for c in claims.criteria for m in c.measured]
    columns: dict[str, list] = {k: [] for k in dict.fromkeys(keys)}
    verdicts = []
    for _, row in runs.iterrows():
        metrics = {c.removeprefix("metrics."): row[c] for c in runs.columns
                   if c.startswith("metrics.") and row[c] == row[c]}   # drop NaN
        values = values_from_run_metrics(declared, metrics)
        for key in columns:
            summary = summarize_metric(values, key)
            columns[key].append(round(summary.mean, 4) if summary else None)
        verdicts.append(overall(judge(claims, values)))
    return {"verdict": verdicts, **columns}


def _table(project: Project, method: str, runs, metric_filter: str | None) -> str:
    import pandas as pd

    params = [c for c in runs.columns if c.startswith("params.")]
    differing = [c for c in params if runs[c].astype(str).nunique(dropna=False) > 1]
    table = pd.DataFrame({
        "run": runs["run_id"].str[:8],
        "start": runs["start_time"].dt.strftime("%m-%d %H:%M"),
        "status": runs["status"],
        "profile": runs.get("tags.profile"),
        "git": runs.get("tags.git_sha", pd.Series("", index=runs.index)).astype(str).str[:7],
        "executed": runs.get("tags.executed"),
    })
    for column in differing:
        table[column.removeprefix("params.")] = runs[column]
    columns = key_metric_columns(project, method, runs) if metric_filter is None else {}
    if not columns:   # no claims, or a filter: the raw metrics, headline stages first
        metrics = [c for c in runs.columns if c.startswith("metrics.")
                   and (metric_filter is None or metric_filter in c)]
        if metric_filter is None:
            metrics = sorted(metrics, key=lambda c: ("evaluate" not in c and "report" not in c, c))[:12]
        columns = {c.removeprefix("metrics."): runs[c].round(4).tolist() for c in metrics}
    for name, values in columns.items():
        table[name] = values
    header = (f"{method}: {len(runs)} run(s); params that differ: "
              f"{', '.join(c.removeprefix('params.') for c in differing) or 'none'}\n")
    return header + table.to_string(index=False)
