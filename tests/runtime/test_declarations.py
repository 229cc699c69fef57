"""Declarations -> DVC files and params: golden files, validation, boundaries."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from flows.runtime import pipeline, registry
from flows.runtime.dag import DeclaredParams, Method, Stage
from flows.runtime.project import Project

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = {"prefect", "prefect_ray", "mlflow", "dvc", "ray"}


def real_methods(monkeypatch) -> list[Method]:
    monkeypatch.delenv("REPRO_EXTRA_FLOWS", raising=False)
    return registry.all_methods()


def test_committed_pipeline_files_are_up_to_date(monkeypatch):
    methods = real_methods(monkeypatch)
    assert "linrnn" in [m.name for m in methods]
    for method in methods:
        committed = Project(REPO).pipeline_file(method.name)
        expected = pipeline.render_yaml(pipeline.pipeline_document(method),
                                        pipeline.PIPELINE_HEADER.format(name=method.name))
        assert committed.is_file(), f"{committed} missing: run `repro gen`"
        assert committed.read_text() == expected, f"{committed} is stale: run `repro gen`"


def test_every_profile_of_every_method_validates(monkeypatch):
    for method in real_methods(monkeypatch):
        for profile in ("smoke", "small", "paper"):
            config = pipeline.build_config(method, profile)
            pipeline.params_document(method, config, profile)  # fan-outs are non-empty


def test_invalid_param_names_the_key():
    method = registry.get("linrnn")
    with pytest.raises(ValidationError, match=r"two_state\.n_paths"):
        pipeline.build_config(method, "small", {"two_state": {"n_paths": "many"}})
    with pytest.raises(ValidationError, match=r"two_state\.n_pathz"):
        pipeline.build_config(method, "small", {"two_state": {"n_pathz": 3}})


def test_unknown_profile_is_rejected():
    with pytest.raises(ValueError, match="unknown profile"):
        pipeline.build_config(registry.get("linrnn"), "huge")


def test_stage_cannot_read_undeclared_params():
    config = pipeline.build_config(registry.get("linrnn"), "smoke")
    view = DeclaredParams(config, ("exact",), "verify_exact")
    assert view.exact.n_states == 8
    with pytest.raises(AttributeError, match="does not declare"):
        view.two_state


def test_fan_out_items_and_tracked_params():
    method = registry.get("linrnn")
    stage = method.stage("train_ringworld")
    config = pipeline.build_config(method, "small")
    items = stage.fan_out_items(config)
    assert items["alf_direct-2"] == {"variant": "alf_direct", "seed": 2}
    assert len(items) == len(config.ringworld.variants) * len(config.seeds)
    spec = pipeline.stage_spec(method, stage)
    params = spec["do"]["params"]
    # the axes are tracked per item, not as whole lists (adding a seed dirties no other item)
    assert "seeds" not in params and "ringworld.variants" not in params
    assert "ringworld.lr" in params and "fanout.train_ringworld.${key}" in params


def test_deps_must_be_declared_first():
    with pytest.raises(ValueError, match="declared before"):
        Method("m", "t", "x:y", stages=(Stage("b", "x:f", deps=("a",)), Stage("a", "x:f")))


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_components_never_import_orchestration():
    offenders = {str(p.relative_to(REPO)): sorted(_imports(p) & FORBIDDEN)
                 for p in (REPO / "components").rglob("*.py") if _imports(p) & FORBIDDEN}
    assert not offenders, f"components must stay pure: {offenders}"


def test_committed_root_pipeline_is_up_to_date(monkeypatch):
    methods = real_methods(monkeypatch)
    expected = pipeline.render_yaml(pipeline.root_pipeline_document(methods), pipeline.ROOT_HEADER)
    assert (REPO / "dvc.yaml").read_text() == expected, "root dvc.yaml is stale: run `repro gen`"
