"""Staleness as DVC decides it: per-item deps of a fan-out chain, one status call per method,
dry runs, STAGE@ITEM and --to selections, the parent run's name."""
from __future__ import annotations

import os

import pytest

from flows.runtime import runner
from flows.runtime.dvc_bridge import DvcBridge
from flows.runtime.testing import make_project, run_in_temp_project

C = "chain_flow"


@pytest.fixture
def chain(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_EXTRA_FLOWS", f"{os.environ['REPRO_EXTRA_FLOWS']},tests.runtime.chain_flow")
    return make_project(tmp_path / "proj", [C])


def test_adding_a_seed_runs_only_the_new_items_down_a_fan_out_chain(chain):
    first = run_in_temp_project(C, chain.root)
    assert sorted(first.executed) == ["make_data", "shift@0", "shift@1", "square@0", "square@1", "total"]
    more = run_in_temp_project(C, chain.root, overrides={"seeds": [0, 1, 2]})
    assert sorted(more.executed) == ["shift@2", "square@2", "total"]
    assert more.metrics(C, "total")["n_parts"] == 3
    # the chain's dvc.yaml tracks each shift item's own square item, not the whole stage
    text = chain.pipeline_file(C).read_text()
    assert "square/${key}" in text


def test_dry_run_says_what_would_run_and_changes_nothing(chain, capsys):
    run_in_temp_project(C, chain.root)
    params_before = chain.params_file(C).read_text()
    lock_before = (chain.method_dir(C) / "dvc.lock").read_text()
    dry = run_in_temp_project(C, chain.root, overrides={"n": 5}, dry_run=True)
    out = capsys.readouterr().out
    assert dry.executed == []
    assert "would run make_data (params: n modified)" in out
    assert "would check square@0 (after make_data" in out
    assert chain.params_file(C).read_text() == params_before
    assert (chain.method_dir(C) / "dvc.lock").read_text() == lock_before
    # a real run then changes n; switching back: the dry run names the run-cache restore
    run_in_temp_project(C, chain.root, overrides={"n": 5})
    run_in_temp_project(C, chain.root, dry_run=True)
    assert "would restore make_data from the DVC run-cache" in capsys.readouterr().out


def test_to_stage_and_stage_at_item_selections(chain):
    to = run_in_temp_project(C, chain.root, selection=runner.Selection(to="square"))
    assert sorted(to.executed) == ["make_data", "square@0", "square@1"]
    one = run_in_temp_project(C, chain.root, selection=runner.Selection(only=frozenset({"shift@1"})))
    assert one.executed == ["shift@1"]
    with pytest.raises(SystemExit, match="no such item; shift has shift@0, shift@1"):
        run_in_temp_project(C, chain.root, selection=runner.Selection(force=frozenset({"shift@7"})))


def test_one_status_call_plans_a_method(chain, monkeypatch):
    run_in_temp_project(C, chain.root)
    calls = []
    real = DvcBridge.pipeline_status
    monkeypatch.setattr(DvcBridge, "pipeline_status", lambda self, f: calls.append(f) or real(self, f))
    monkeypatch.setattr(DvcBridge, "status", lambda self, addr: pytest.fail(f"per-instance status {addr}"))
    assert run_in_temp_project(C, chain.root).executed == []
    assert len(calls) == 1


def test_run_name_names_the_mlflow_parent_run(chain):
    from mlflow import MlflowClient

    result = run_in_temp_project(C, chain.root, run_name="lr-sweep-1")
    parent = MlflowClient(chain.tracking_uri).get_run(result.outcomes[0].parent_run_id)
    assert parent.data.tags["mlflow.runName"] == "lr-sweep-1"
