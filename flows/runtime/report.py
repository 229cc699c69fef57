"""``repro report``: the reproduction scorecard, built from the tracked runs.

For each method: its claim (CLAIMS.md front matter), the latest finished run of the chosen
profile in MLflow (the parent run's metrics are every stage's results as they stood after
that run), the verdict per criterion, the plots the method declares, and the provenance of
each number (MLflow run ids, git sha, DVC stage hashes). Markdown with PNG files next to it,
and one self-contained HTML page (plots embedded).
"""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.runtime.claims import Claims, Plot, load_claims
from flows.runtime.dag import Method
from flows.runtime.project import Project
from flows.runtime.results import (NOT_RUN, InstanceValues, Verdict, judge, overall,
                                   summarize_metric, values_from_run_metrics)


@dataclass
class Provenance:
    instance: str
    run_id: str | None      # the child run that computed it; None: restored by DVC, no run here
    stage_hash: str


@dataclass
class MethodReport:
    method: Method
    claims: Claims | None
    profile: str
    parent: Any = None                       # mlflow Run the numbers came from
    values: InstanceValues = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    provenance: list[Provenance] = field(default_factory=list)
    children: dict[str, Any] = field(default_factory=dict)   # instance -> child Run

    @property
    def verdict(self) -> str:
        if self.parent is None:
            return NOT_RUN
        return overall(self.verdicts) if self.claims else "no machine-readable claims"


class RunStore:
    """Read access to one MLflow tracking store (the same one ``repro run`` writes)."""

    def __init__(self, tracking_uri: str):
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)

    def runs(self, method: str) -> list[Any]:
        experiment = self.client.get_experiment_by_name(method)
        if experiment is None:
            return []
        return list(self.client.search_runs([experiment.experiment_id], max_results=50_000,
                                            order_by=["attributes.start_time DESC"]))

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in self.client.get_metric_history(run_id, key)]


def latest_parent(runs: list[Any], profile: str) -> Any | None:
    """The newest finished ``repro run`` of this profile (runs come newest first)."""
    for run in runs:
        tags = run.data.tags
        if ("mlflow.parentRunId" not in tags and tags.get("profile") == profile
                and run.info.status == "FINISHED"):
            return run
    return None


def producing_children(runs: list[Any], parent: Any, profile: str) -> dict[str, Any]:
    """For every stage instance, the newest child run of this profile that started before the
    parent ended: the run that computed the value the parent reports."""
    profiles = {r.info.run_id: r.data.tags.get("profile") for r in runs
                if "mlflow.parentRunId" not in r.data.tags}
    found: dict[str, Any] = {}
    for run in runs:
        tags = run.data.tags
        parent_id = tags.get("mlflow.parentRunId")
        if (parent_id is None or profiles.get(parent_id) != profile or run.info.status != "FINISHED"
                or run.info.start_time > (parent.info.end_time or run.info.start_time)):
            continue
        name = f"{tags['stage']}@{tags['item']}" if tags.get("item") else tags.get("stage", "")
        found.setdefault(name, run)
    return found


def build_method_report(project: Project, store: RunStore, method: Method, profile: str) -> MethodReport:
    report = MethodReport(method, load_claims(project.root, method.name), profile)
    runs = store.runs(method.name)
    report.parent = latest_parent(runs, profile)
    if report.parent is None:
        return report
    report.values = values_from_run_metrics(method, report.parent.data.metrics)
    report.verdicts = judge(report.claims, report.values) if report.claims else []
    report.children = producing_children(runs, report.parent, profile)
    report.provenance = [_provenance(stage, item, report.children)
                         for stage, item in sorted(report.values, key=lambda k: (k[0], k[1] or ""))]
    return report


def _provenance(stage: str, item: str | None, children: dict[str, Any]) -> Provenance:
    name = f"{stage}@{item}" if item else stage
    run = children.get(name)
    if run is None:
        return Provenance(name, None, "")
    return Provenance(name, run.info.run_id, run.data.tags.get("dvc.stage_hash", ""))


# ---------------------------------------------------------------------------------- plots
def render_plot(plot: Plot, report: MethodReport, store: RunStore) -> bytes | None:
    """PNG bytes of one declared plot, or None when the runs hold nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    try:
        drawn = _draw_curve(ax, plot, report, store) if plot.kind == "curve" else _draw_bars(ax, plot, report)
        if not drawn:
            return None
        ax.set_title(plot.title)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(fig)


def _draw_curve(ax, plot: Plot, report: MethodReport, store: RunStore) -> bool:
    from flows.runtime.tracking import mlflow_key

    lines = 0
    for name, run in sorted(report.children.items()):
        if run.data.tags.get("stage") != plot.stage:
            continue
        points = store.history(run.info.run_id, mlflow_key(plot.metric or ""))
        if len(points) > 1:
            steps, values = zip(*sorted(points))
            ax.plot(steps, values, label=name.partition("@")[2] or name, linewidth=1.2)
            lines += 1
    if lines:
        ax.set_xlabel("step")
        ax.set_ylabel(plot.metric)
        if lines <= 12:
            ax.legend(fontsize=7)
    return lines > 0


def _draw_bars(ax, plot: Plot, report: MethodReport) -> bool:
    summaries = [s for m in plot.metrics if (s := summarize_metric(report.values, m)) is not None]
    if not summaries:
        return False
    means = [s.mean for s in summaries]
    errors = [[s.mean - s.ci[0] for s in summaries], [s.ci[1] - s.mean for s in summaries]]
    ax.bar(range(len(summaries)), means, yerr=errors, capsize=4, color="#4878a8")
    ax.set_xticks(range(len(summaries)), [s.metric.split("/", 1)[1] for s in summaries],
                  rotation=20, ha="right", fontsize=8)
    return True


# -------------------------------------------------------------------------------- output
@dataclass
class Figure:
    method: str
    title: str
    png: bytes

    @property
    def filename(self) -> str:
        slug = "".join(c if c.isalnum() else "-" for c in self.title.lower()).strip("-")
        return f"{self.method}-{slug}.png"


def markdown(reports: list[MethodReport], figures: dict[str, list[Figure]], header: dict[str, str]) -> str:
    lines = ["# Reproduction scorecard", "",
             f"Built from the MLflow store `{header['tracking_uri']}` at git `{header['git']}` "
             f"on {header['date']}; profile `{header['profile']}`. Every number below is read "
             "from a tracked run.", "",
             "| method | title | verdict | run | git | finished |", "|---|---|---|---|---|---|"]
    for r in reports:
        lines.append(f"| [{r.method.name}](#{r.method.name}) | {r.method.title} | {r.verdict} | "
                     f"{_run_cell(r)} | {_tag(r, 'git_sha')[:7]} | {_finished(r)} |")
    for r in reports:
        lines += ["", *_method_markdown(r, figures.get(r.method.name, []))]
    return "\n".join(lines) + "\n"


def _method_markdown(r: MethodReport, figures: list[Figure]) -> list[str]:
    out = [f"## {r.method.name}", "", f"**{r.method.title}**", ""]
    if r.claims:
        out += [f"- Paper: {r.claims.paper}", f"- Claim: {r.claims.claim}",
                f"- Paper's headline numbers: {r.claims.headline}",
                f"- Seeds: {', '.join(map(str, r.claims.seeds)) or 'n/a'}", ""]
    else:
        out += [f"No machine-readable claims: components/{r.method.name}/CLAIMS.md has no front matter.", ""]
    if r.parent is None:
        return out + [f"Not run yet with profile `{r.profile}`: `repro run {r.method.name} --profile {r.profile}`."]
    out += [f"Verdict: **{r.verdict}**. Run `{r.parent.info.run_id}` (git {_tag(r, 'git_sha')[:12]}"
            f"{' + uncommitted changes' if _tag(r, 'git_dirty') == 'true' else ''}, finished {_finished(r)}).", ""]
    if r.verdicts:
        out += ["| criterion | pass if | measured | verdict |", "|---|---|---|---|"]
        for v in r.verdicts:
            measured = "; ".join(f"`{s.metric}` = {s.text()}" for s in [v.summary, v.reference, *v.measured] if s)
            gate = "" if v.criterion.gated else " (not gated)"
            gate += "" if v.criterion.kind == "claim" else f" ({v.criterion.kind})"
            out.append(f"| **{v.criterion.id}** {_cell(v.criterion.text)}{gate} | "
                       f"`{v.criterion.metric}` {v.criterion.passes_if} | {measured or '—'} | {v.status} |")
        out.append("")
    out += [f"![{f.title}](plots/{f.filename})" for f in figures]
    out += ["", "<details><summary>Provenance: MLflow runs and DVC stage hashes</summary>", "",
            "| stage instance | MLflow run | DVC stage hash |", "|---|---|---|"]
    out += [f"| {p.instance} | {p.run_id or 'restored by DVC (no run in this store)'} | "
            f"{p.stage_hash[:12]} |" for p in r.provenance]
    return out + ["", "</details>"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _tag(r: MethodReport, key: str) -> str:
    return r.parent.data.tags.get(key, "") if r.parent is not None else ""


def _run_cell(r: MethodReport) -> str:
    return f"`{r.parent.info.run_id[:8]}`" if r.parent is not None else "—"


def _finished(r: MethodReport) -> str:
    import datetime as dt

    if r.parent is None or not r.parent.info.end_time:
        return "—"
    return dt.datetime.fromtimestamp(r.parent.info.end_time / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def html_page(markdown_text: str, figures: dict[str, list[Figure]]) -> str:
    """The Markdown rendered as one HTML file with the plots inlined (opens anywhere)."""
    import markdown as md

    body = md.markdown(markdown_text, extensions=["tables", "md_in_html"])
    for method_figures in figures.values():
        for f in method_figures:
            data = base64.b64encode(f.png).decode()
            body = body.replace(f'src="plots/{f.filename}"', f'src="data:image/png;base64,{data}"')
    style = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
             "vertical-align:top;font-size:14px}img{max-width:100%}code{font-size:90%}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape('Reproduction scorecard')}"
            f"</title><style>{style}</style></head><body>\n{body}\n</body></html>\n")


def build(project: Project, methods: list[Method], profile: str, out_dir: Path) -> list[MethodReport]:
    """Write ``scorecard.md``, ``scorecard.html`` and ``plots/*.png`` under ``out_dir``."""
    import datetime as dt

    from components.common.io import write_bytes_atomic
    from flows.runtime.runner import git_info

    store = RunStore(project.tracking_uri)
    reports = [build_method_report(project, store, m, profile) for m in methods]
    figures = {r.method.name: _figures(r, store) for r in reports}
    header = {"tracking_uri": project.tracking_uri, "git": git_info(project).get("git_sha", "")[:12],
              "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "profile": profile}
    text = markdown(reports, figures, header)
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    for method_figures in figures.values():
        for f in method_figures:
            (out_dir / "plots" / f.filename).write_bytes(f.png)
    write_bytes_atomic(out_dir / "scorecard.md", text.encode())
    write_bytes_atomic(out_dir / "scorecard.html", html_page(text, figures).encode())
    return reports


def _figures(report: MethodReport, store: RunStore) -> list[Figure]:
    if report.claims is None or report.parent is None:
        return []
    figures = []
    for plot in report.claims.plots:
        png = render_plot(plot, report, store)
        if png is not None:
            figures.append(Figure(report.method.name, plot.title, png))
    return figures


# ----------------------------------------------------------------------- README method table
README_BEGIN, README_END = "<!-- methods-table:begin -->", "<!-- methods-table:end -->"


def methods_table(project: Project, methods: list[Method]) -> str:
    """The README's method table: claims from CLAIMS.md, verdicts from the committed DVC
    metrics of the small profile (the same judging code as the scorecard)."""
    from flows.runtime import pipeline
    from flows.runtime.results import values_from_dvc

    rows = ["| method | paper (ICML 2026) | criteria | small-profile verdict (committed metrics) |",
            "|---|---|---|---|"]
    for method in methods:
        claims = load_claims(project.root, method.name)
        paper = _cell(claims.paper if claims else method.title)
        if claims is None:
            rows.append(f"| {method.name} | {paper} | — | no machine-readable claims yet |")
            continue
        params_file = project.params_file(method.name)
        small = params_file.is_file() and pipeline.read_params(project, method).get("profile") == "small"
        values = values_from_dvc(project, method) if small else {}
        verdict = overall(judge(claims, values)) if values else "no small-run metrics committed"
        rows.append(f"| [{method.name}](components/{method.name}/CLAIMS.md) | {paper} | "
                    f"{len(claims.criteria)} | {verdict} |")
    return "\n".join(rows)


def readme_with_table(readme: str, table: str) -> str:
    begin, end = readme.index(README_BEGIN), readme.index(README_END)
    return readme[:begin + len(README_BEGIN)] + "\n" + table + "\n" + readme[end:]
