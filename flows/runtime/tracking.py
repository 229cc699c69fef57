"""MLflow records, written by the driver alone (one writer keeps sqlite happy).

One experiment per method, one parent run per ``repro run``, one child run per executed
stage instance. Explicit run ids through ``MlflowClient``: no fluent, thread-local state.
"""
from __future__ import annotations

import json
import math
import time
from typing import Any

from flows.runtime.execute import StageRecord
from flows.runtime.project import Project


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value
    return out


def numeric_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """Numbers in a (nested) summary; pass/fail flags become 1.0 / 0.0 (criteria read them)."""
    flat = _flatten("", summary, {})
    return {k: float(v) for k, v in flat.items()
            if isinstance(v, (int, float)) and math.isfinite(float(v))}


def mlflow_key(key: str) -> str:
    # MLflow allows alphanumerics, _ - . space / ; replace anything else
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in key)[:250]


def child_run_name(method: str, stage: str, item: dict[str, Any] | None, profile: str) -> str:
    """``linrnn train_ringworld variant=alf seed=0 [small]``: readable in the UI's compare view."""
    fields = " ".join(f"{k}={v}" for k, v in (item or {}).items())
    return " ".join(part for part in (method, stage, fields, f"[{profile}]") if part)


def search_runs_frame(tracking_uri: str, **kwargs: Any):
    """``mlflow.search_runs`` (a DataFrame) against ``tracking_uri`` without leaving it behind:
    ``mlflow.set_tracking_uri`` also sets ``MLFLOW_TRACKING_URI`` in the process environment,
    which would send every later run of this process (tests, ``repro run``) to that store."""
    import os

    import mlflow

    previous_env = os.environ.get("MLFLOW_TRACKING_URI")
    previous = mlflow.get_tracking_uri() if previous_env else None
    mlflow.set_tracking_uri(tracking_uri)
    try:
        return mlflow.search_runs(**kwargs)
    finally:
        if previous_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
            mlflow.tracking._tracking_service.utils._tracking_uri = None
        else:
            mlflow.set_tracking_uri(previous)


class Tracker:
    def __init__(self, project: Project):
        from mlflow import MlflowClient

        self.project = project
        self.client = MlflowClient(tracking_uri=project.tracking_uri)

    def experiment_id(self, method: str) -> str:
        found = self.client.get_experiment_by_name(method)
        if found is not None:
            return found.experiment_id
        if self.project.tracking_uri.startswith(("http://", "https://", "databricks")):
            # a tracking server stores artifacts where it was told (--artifacts-destination)
            return self.client.create_experiment(method)
        return self.client.create_experiment(
            method, artifact_location=f"{self.project.artifact_root}/{method}")

    def start_parent(self, method: str, profile: str, params: dict[str, Any], tags: dict[str, str],
                     run_name: str | None = None) -> str:
        run = self.client.create_run(self.experiment_id(method), run_name=run_name or f"{method}-{profile}",
                                     tags={"profile": profile, "method": method, **tags})
        self._log_params(run.info.run_id, params)
        return run.info.run_id

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        flat = _flatten("", params, {})
        entries = [Param(mlflow_key(k), (v if isinstance(v, str) else json.dumps(v))[:6000])
                   for k, v in flat.items()]
        for i in range(0, len(entries), 100):
            self.client.log_batch(run_id, params=entries[i:i + 100])

    def log_stage(self, parent_id: str, record: StageRecord, params: dict[str, Any],
                  dvc_info: dict[str, Any], profile: str) -> str:
        experiment = self.experiment_id(record.method)
        run = self.client.create_run(
            experiment, start_time=int(record.started * 1000),
            run_name=child_run_name(record.method, record.stage, params.get("item"), profile),
            tags={"mlflow.parentRunId": parent_id, "method": record.method, "stage": record.stage,
                  "item": record.item_key or "", "profile": profile,
                  "dvc.stage_hash": dvc_info.get("stage_hash") or "", **process_tags(),
                  **{f"node.{k}": v for k, v in record.node.items()}})
        run_id = run.info.run_id
        try:
            self._record_stage(run_id, record, params, dvc_info)
        except BaseException:
            self.client.set_terminated(run_id, "FAILED")  # never a RUNNING run of a live driver
            raise
        self.client.set_terminated(run_id, "FINISHED", end_time=int(record.ended * 1000))
        return run_id

    def _record_stage(self, run_id: str, record: StageRecord, params: dict[str, Any],
                      dvc_info: dict[str, Any]) -> None:
        from mlflow.entities import Dataset, DatasetInput, InputTag, Metric

        self._log_params(run_id, params)
        metrics = [Metric(mlflow_key(name), value, int(ts * 1000), step or 0)
                   for name, value, step, ts in record.history if math.isfinite(value)]
        now = int(record.ended * 1000)
        metrics += [Metric(mlflow_key(k), v, now, 0) for k, v in numeric_metrics(record.summary).items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[i:i + 1000])
        datasets = [
            DatasetInput(Dataset(name=path, digest=md5[:36], source_type="dvc",
                                 source=json.dumps({"path": path, "md5": md5})),
                         tags=[InputTag("mlflow.data.context", "stage-input")])
            for path, md5 in dvc_info.get("deps", {}).items() if md5
        ]
        if datasets:
            self.client.log_inputs(run_id, datasets=datasets)
        for artifact in record.artifacts:
            self.client.log_artifact(run_id, artifact)

    def log_failed_stage(self, parent_id: str, method: str, stage: str, item_key: str | None,
                         params: dict[str, Any], error: str, traceback_text: str, profile: str) -> str:
        """A child run for a stage that raised: FAILED, its params, the traceback as an artifact."""
        run = self.client.create_run(
            self.experiment_id(method),
            run_name=child_run_name(method, stage, params.get("item"), profile),
            tags={"mlflow.parentRunId": parent_id, "method": method, "stage": stage,
                  "item": item_key or "", "profile": profile, "error": error[:5000],
                  **process_tags()})
        try:
            self._log_params(run.info.run_id, params)
            self.client.log_text(run.info.run_id, traceback_text or error, "traceback.txt")
        finally:
            self.client.set_terminated(run.info.run_id, "FAILED")
        return run.info.run_id

    def mark_dead_runs_killed(self, method: str) -> list[str]:
        """Runs left RUNNING by a process of this host that no longer exists (killed, crashed):
        marked KILLED, so a RUNNING run is always one that is still going."""
        from flows.runtime.processes import pid_alive

        found = self.client.get_experiment_by_name(method)
        if found is None:
            return []
        here = process_tags()["host"]
        killed = []
        for run in self.client.search_runs([found.experiment_id], "attributes.status = 'RUNNING'",
                                           max_results=10_000):
            pid, host = run.data.tags.get("pid"), run.data.tags.get("host")
            if pid and pid.isdigit() and host == here and not pid_alive(int(pid)):
                self.client.set_tag(run.info.run_id, "killed_reason", f"process {pid} was gone")
                self.client.set_terminated(run.info.run_id, "KILLED")
                killed.append(run.info.run_id)
        return killed

    def log_parent_metrics(self, parent_id: str, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        entries = [Metric(mlflow_key(k), v, now, 0) for k, v in metrics.items()]
        for i in range(0, len(entries), 1000):
            self.client.log_batch(parent_id, metrics=entries[i:i + 1000])

    def finish_parent(self, parent_id: str, status: str, tags: dict[str, str] | None = None) -> None:
        """``status``: FINISHED, FAILED or KILLED (interrupted)."""
        for key, value in (tags or {}).items():
            self.client.set_tag(parent_id, key, value)
        self.client.set_terminated(parent_id, status)


def process_tags() -> dict[str, str]:
    """Who writes a run: a RUNNING run whose process is gone was killed."""
    import os
    import socket

    return {"pid": str(os.getpid()), "host": socket.gethostname()}
