"""From a method declaration to its DVC files: ``data/<m>/dvc.yaml`` and ``data/<m>/params.yaml``.

``dvc.yaml`` does not depend on the profile: fan-out stages use DVC's ``foreach`` over the
``fanout.<stage>`` entries of the params file, which the runtime writes for the chosen profile.
Paths inside the file are relative to ``data/<m>/`` (DVC's default working dir).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from components.common.config import MethodConfig
from components.common.io import write_bytes_atomic
from flows.runtime.dag import Method, Stage
from flows.runtime.project import DEFAULT_SETTINGS, Project

FANOUT_KEY = "fanout"


def build_config(method: Method, profile: str, overrides: dict[str, Any] | None = None) -> MethodConfig:
    """Validate the profile plus overrides; a bad key or value raises naming the key."""
    return method.config_class().for_profile(profile, overrides)


def params_document(method: Method, config: MethodConfig, profile: str) -> dict[str, Any]:
    doc = {"profile": profile, **config.model_dump(mode="json")}
    fanouts = {s.name: s.fan_out_items(config) for s in method.stages if s.fan_out}
    for name, items in fanouts.items():
        if not items:
            raise SystemExit(f"{method.name}.{name}: fan-out is empty; check {method.stage(name).fan_out}")
    if fanouts:
        doc[FANOUT_KEY] = fanouts
    return doc


def config_from_params(method: Method, params: dict[str, Any]) -> MethodConfig:
    values = {k: v for k, v in params.items() if k not in ("profile", FANOUT_KEY)}
    return method.config_class().model_validate(values)


def _tracked_params(method: Method, stage: Stage, config_class: type[MethodConfig]) -> list[str]:
    """DVC params keys of a stage: its declared keys, minus fan-out axes (each instance tracks
    only its own item), expanded one level so that adding a seed does not dirty other items.
    A stage reading a fan-out upstream also tracks that upstream's item set."""
    axes = set(stage.fan_out.values())
    keys: list[str] = []
    for key in stage.params:
        if key in axes:
            continue
        annotation = config_class.model_fields[key].annotation
        nested = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if nested and any(a.startswith(f"{key}.") for a in axes):
            keys += [f"{key}.{f}" for f in annotation.model_fields if f"{key}.{f}" not in axes]
        else:
            keys.append(key)
    if stage.fan_out:
        keys.append(f"{FANOUT_KEY}.{stage.name}.${{key}}")
    keys += [f"{FANOUT_KEY}.{dep}" for dep in stage.deps
             if method.stage(dep).fan_out and dep not in stage.item_deps]
    return keys


def stage_spec(method: Method, stage: Stage, code_deps: str = DEFAULT_SETTINGS["code_deps"]) -> dict[str, Any]:
    """``code_deps``: ``folders`` (the method's and the common components folders) or
    ``imports`` (only the files the stage imports; see ``codedeps``)."""
    config_class = method.config_class()
    unknown = [k for k in stage.params if k not in config_class.model_fields]
    if unknown:
        raise ValueError(f"{method.name}.{stage.name}: params {unknown} are not fields of {config_class.__name__}")
    suffix = "/${key}" if stage.fan_out else ""
    spec: dict[str, Any] = {
        "cmd": f"repro exec {method.name} {stage.name}" + (" --item ${key}" if stage.fan_out else ""),
        "deps": [f"../../{p}" for p in method.stage_code_paths(stage, by_imports=code_deps == "imports")]
                + [f"{d}/${{key}}" if d in stage.item_deps else d for d in stage.deps],
    }
    params = _tracked_params(method, stage, config_class)
    if params:
        spec["params"] = params
    spec["outs"] = [f"{stage.name}{suffix}"]
    if stage.metrics:
        metrics = f"metrics/{stage.name}/${{key}}.json" if stage.fan_out else f"metrics/{stage.name}.json"
        spec["metrics"] = [{metrics: {"cache": False}}]
    if stage.description:
        spec["desc"] = stage.description
    if stage.fan_out:
        return {"foreach": f"${{{FANOUT_KEY}.{stage.name}}}", "do": spec}
    return spec


def pipeline_document(method: Method, code_deps: str = DEFAULT_SETTINGS["code_deps"]) -> dict[str, Any]:
    return {"stages": {s.name: stage_spec(method, s, code_deps) for s in method.stages}}


def render_yaml(doc: dict[str, Any], header: str = "") -> str:
    return header + yaml.safe_dump(doc, sort_keys=False, width=100)


PIPELINE_HEADER = "# Generated from flows/{name}.py by `repro gen`; do not edit by hand.\n"


def write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text() == text:
        return False
    write_bytes_atomic(path, text.encode())
    return True


def write_pipeline(project: Project, method: Method) -> bool:
    settings = project.settings() if (project.root / "params.yaml").is_file() else DEFAULT_SETTINGS
    code_deps = settings["code_deps"]
    text = render_yaml(pipeline_document(method, code_deps), PIPELINE_HEADER.format(name=method.name))
    return write_if_changed(project.pipeline_file(method.name), text)


def write_params(project: Project, method: Method, config: MethodConfig, profile: str) -> bool:
    text = render_yaml(params_document(method, config, profile),
                       f"# {method.name} params for profile '{profile}', written by `repro run`.\n")
    return write_if_changed(project.params_file(method.name), text)


def read_params(project: Project, method: Method) -> dict[str, Any]:
    path = project.params_file(method.name)
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `repro run {method.name}` or `repro gen` first")
    return yaml.safe_load(path.read_text())


# --- The root pipeline: cross-method stages -------------------------------------------

INDEX_FILE = "data/metrics_index.json"
ROOT_HEADER = "# Cross-method stages, generated by `repro gen` from the registered methods.\n"


def root_pipeline_document(methods: list[Method]) -> dict[str, Any]:
    """``metrics_index``: every method's current stage metrics in one file (the input of the
    scorecard). ``dvc repro`` of it reproduces every method's pipeline first."""
    return {"stages": {"metrics_index": {
        "cmd": "repro index",
        "deps": [f"data/{m.name}/metrics" for m in methods],
        "metrics": [{INDEX_FILE: {"cache": False}}],
        "desc": "all methods' stage metrics in one file",
    }}}


def write_root_pipeline(project: Project, methods: list[Method]) -> bool:
    return write_if_changed(project.root / "dvc.yaml", render_yaml(root_pipeline_document(methods), ROOT_HEADER))


def metrics_index(project: Project, methods: list[Method]) -> dict[str, Any]:
    from components.common.io import read_json

    index: dict[str, Any] = {}
    for method in methods:
        folder = project.method_dir(method.name) / "metrics"
        for path in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
            key = str(path.relative_to(folder).with_suffix(""))
            index.setdefault(method.name, {})[key] = read_json(path)
    return index
