"""A method's measured results, from MLflow (the tracked runs) or from DVC's metrics files,
checked against its claims. No per-method code: everything comes from the method's
declaration (stages, fan-out) and the front matter of its CLAIMS.md.

Values are keyed by stage instance: ``(stage, item_key or None) -> {metric key: value}``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from components.common.metrics import summarize
from flows.runtime.claims import Claims, Criterion
from flows.runtime.dag import Method
from flows.runtime.project import Project
from flows.runtime.tracking import mlflow_key, numeric_metrics

Instance = tuple[str, "str | None"]
InstanceValues = dict[Instance, dict[str, float]]

REPRODUCED, NOT_REPRODUCED, NOT_RUN = "reproduced", "not reproduced", "not run yet"
INCONCLUSIVE = "inconclusive (premise not met)"
PREMISE_MET, PREMISE_NOT_MET = "premise met", "premise not met"
REPORTED = "reported"


@dataclass
class Summary:
    """One ``<stage>/<key>`` metric over the stage's instances (one value, or one per item)."""
    metric: str
    by_item: dict[str, float]

    @property
    def values(self) -> list[float]:
        return list(self.by_item.values())

    @cached_property
    def stats(self) -> dict[str, float]:
        """mean, std, n and the bootstrap CI, computed once (the CI resamples 10,000 times)."""
        return summarize(self.values)

    @property
    def mean(self) -> float:
        return self.stats["mean"]

    @property
    def std(self) -> float:
        return self.stats["std"]

    @property
    def ci(self) -> tuple[float, float]:
        return self.stats["ci_low"], self.stats["ci_high"]

    def text(self, digits: int = 4) -> str:
        if len(self.values) == 1:
            return f"{self.mean:.{digits}g}"
        low, high = self.ci
        return (f"{self.mean:.{digits}g} ± {self.std:.2g} (95% CI {low:.{digits}g}–{high:.{digits}g}, "
                f"n={len(self.values)})")


@dataclass
class Verdict:
    criterion: Criterion
    summary: Summary | None
    measured: list[Summary] = field(default_factory=list)
    reference: Summary | None = None    # the metric a relative threshold refers to
    premise_failed: bool = False        # a gated premise criterion of the method is not met

    @property
    def passed(self) -> bool | None:
        """The comparison itself; None when a value it needs is missing."""
        if self.summary is None or (self.criterion.reference and self.reference is None):
            return None
        ref = self.reference.mean if self.reference else None
        return self.criterion.passes(self.summary.mean, ref)

    @property
    def status(self) -> str:
        """A premise is met or not; a reported number is just reported; a claim is reproduced
        or not, unless a premise failed: then the method was not tested and it is inconclusive."""
        passed = self.passed
        if passed is None:
            return NOT_RUN
        kind = self.criterion.kind
        if kind == "premise":
            return PREMISE_MET if passed else PREMISE_NOT_MET
        if kind == "reported":
            return REPORTED
        if self.premise_failed:
            return INCONCLUSIVE
        return REPRODUCED if passed else NOT_REPRODUCED


def summarize_metric(values: InstanceValues, metric: str) -> Summary | None:
    """``train/val_acc``: one value for a plain stage, every item of a fan-out stage."""
    stage, _, key = metric.partition("/")
    key = mlflow_key(key)
    by_item = {item or stage: found[key] for (s, item), found in sorted(values.items(), key=_order)
               if s == stage and key in found}
    return Summary(metric, by_item) if by_item else None


def _order(entry: tuple[Instance, Any]) -> tuple[str, str]:
    (stage, item), _ = entry
    return stage, item or ""


def judge(claims: Claims, values: InstanceValues) -> list[Verdict]:
    verdicts = [Verdict(c, summarize_metric(values, c.metric),
                        [s for m in c.measured if (s := summarize_metric(values, m)) is not None],
                        summarize_metric(values, c.reference) if c.reference else None)
                for c in claims.criteria]
    failed = set(failed_premises(verdicts))
    for verdict in verdicts:
        needs = verdict.criterion.requires
        verdict.premise_failed = bool(failed if needs is None else failed & set(needs))
    return verdicts


def failed_premises(verdicts: list[Verdict]) -> list[str]:
    """Ids of the gated premise criteria that were measured and do not hold."""
    return [v.criterion.id for v in verdicts
            if v.criterion.kind == "premise" and v.criterion.gated and v.passed is False]


def overall(verdicts: list[Verdict]) -> str:
    """``inconclusive (premise not met)`` when a gated premise fails; otherwise ``reproduced``
    only when every gated claim criterion is; ``not run yet`` when none has a value."""
    failed = failed_premises(verdicts)
    inconclusive = f"{INCONCLUSIVE[:-1]}: {', '.join(failed)})"
    claims = [v for v in verdicts if v.criterion.kind == "claim"]
    gated = [v for v in claims if v.criterion.gated] or claims
    if failed and all(v.premise_failed for v in gated):
        return inconclusive
    statuses = [v.status for v in gated if not v.premise_failed]
    if not statuses or all(s == NOT_RUN for s in statuses):
        return NOT_RUN
    passed = statuses.count(REPRODUCED)
    if passed == len(statuses) and not failed:
        return f"{REPRODUCED} ({passed}/{len(statuses)})"
    return f"{passed}/{len(statuses)} {REPRODUCED}" + (
        f", {statuses.count(NOT_RUN)} not run" if NOT_RUN in statuses else "") + (
        f", {len(gated) - len(statuses)} {inconclusive}" if failed else "")


def values_from_dvc(project: Project, method: Method) -> InstanceValues:
    """The metrics files DVC tracks in ``data/<m>/metrics`` (what the checkout holds)."""
    from components.common.io import read_json

    folder = project.method_dir(method.name) / "metrics"
    values: InstanceValues = {}
    for stage in method.stages:
        if (folder / f"{stage.name}.json").is_file():
            values[(stage.name, None)] = _safe_keys(read_json(folder / f"{stage.name}.json"))
        for path in sorted((folder / stage.name).glob("*.json")) if stage.fan_out else []:
            values[(stage.name, path.stem)] = _safe_keys(read_json(path))
    return values


def _safe_keys(summary: dict[str, Any]) -> dict[str, float]:
    # the same key spelling as in MLflow, so both sources answer the same lookups
    return {mlflow_key(k): v for k, v in numeric_metrics(summary).items()}


def values_from_run_metrics(method: Method, metrics: dict[str, float]) -> InstanceValues:
    """A parent run's metrics (``<stage>[@item]/<key>``, sanitised by MLflow's key rules) back
    into instances. The longest matching stage name wins, so ``train_x`` is never ``train``."""
    stages = sorted((s.name for s in method.stages), key=len, reverse=True)
    values: InstanceValues = {}
    for name, value in metrics.items():
        prefix, _, key = name.partition("/")
        for stage in stages:
            safe = mlflow_key(stage)
            if prefix == safe:
                values.setdefault((stage, None), {})[key] = value
                break
            if prefix.startswith(safe + "_") and _is_item(method, stage):
                values.setdefault((stage, prefix[len(safe) + 1:]), {})[key] = value
                break
    return values


def _is_item(method: Method, stage: str) -> bool:
    return bool(method.stage(stage).fan_out)
