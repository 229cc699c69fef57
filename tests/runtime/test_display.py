"""The terminal display: per-stage rows of the live table, and the end-of-run summary."""
from __future__ import annotations

from flows.runtime import display
from flows.runtime.runner import Instance, Outcome, Plan
from tests.runtime.toy_flow import METHOD as TOY


def _plan() -> Plan:
    plan = Plan(TOY, "smoke", {})
    plan.method_instances = [Instance(s, k, "") for s, k in
                             ((TOY.stage("make_data"), None), (TOY.stage("square"), "0"),
                              (TOY.stage("square"), "1"), (TOY.stage("total"), None))]
    plan.run = list(plan.method_instances)
    return plan


def test_live_rows_count_items_and_estimate_from_progress():
    live = display.RunDisplay.for_plan(_plan())
    live.set("make_data", "done")
    live.set("square@0", "running")
    live.progress("square@0", 1, 4)
    live.set("square@1", "failed")
    rows = {row[0]: row for row in live.rows()}
    assert rows["make_data"][1:3] == ("done", "1/1")
    assert rows["square"][1] == "1 running, 1 failed" and rows["square"][2] == "1/2"
    assert rows["square"][4].endswith("s")          # an ETA once progress is known
    assert rows["total"][1:3] == ("queued", "0/1")


def test_not_a_terminal_means_no_live_table(capsys):
    with display.RunDisplay.for_plan(_plan()) as live:   # pytest's stdout is not a TTY
        assert live._live is None
    assert capsys.readouterr().out == ""


def test_summary_lists_each_stage_and_the_parent_run():
    outcome = Outcome("toy_flow", executed=["make_data", "square@0"], restored=["square@1"],
                      failed=["total"], parent_run_id="abc123")
    outcome.add_span("square", 10.0, 12.5)
    outcome.add_span("square", 11.0, 14.0)
    text = display.summary(outcome, _plan(), 20.0)
    assert "MLflow parent run abc123" in text
    square = next(line for line in text.splitlines() if "square" in line)
    assert "4s" in square                     # first start to last end
    assert outcome.stage_walls == {"square": 4.0}


def test_run_without_a_method_lists_methods_with_their_small_wall_time(capsys, monkeypatch, tmp_path):
    from flows import cli

    (tmp_path / ".dvc").mkdir()
    (tmp_path / "params.yaml").write_text("profile: small\n")
    claims = tmp_path / "components" / "toy_flow" / "CLAIMS.md"
    claims.parent.mkdir(parents=True)
    claims.write_text("---\nmethod: toy_flow\nsmall_wall_s: 240\n---\nprose\n")
    monkeypatch.setenv("REPRO_ROOT", str(tmp_path))
    cli.main(["run"])
    out = capsys.readouterr().out
    assert "toy_flow" in out and "[small: ~4 min]" in out
    assert "wall time not recorded" in out          # the real methods' files are not there
