"""The scorecard, ``repro compare`` and the README table, checked against the MLflow records
of real (smoke) runs of the toy method."""
from __future__ import annotations

import textwrap

import pytest

from flows.runtime import registry
from flows.runtime.claims import ClaimsError, Criterion, load_claims
from flows.runtime.dag import Method, Stage
from flows.runtime.report import README_BEGIN, README_END, build, methods_table
from flows.runtime.results import NOT_REPRODUCED, NOT_RUN, REPRODUCED, values_from_run_metrics
from flows.runtime.testing import REPO_ROOT, run_in_temp_project
from tests.runtime.browser import ARTIFACTS, browser  # noqa: F401  (browser is a fixture)

M = "toy_flow"
CLAIMS = textwrap.dedent("""\
    ---
    method: toy_flow
    paper: "A toy paper"
    claim: "Squares add up."
    headline: "total = 25 at n = 3"
    seeds: [0, 1]
    criteria:
      - id: C1
        text: "the total is 25"
        metric: total/total
        passes_if: "== 25"
        measured: [square/sum_sq]
      - id: C2
        text: "squares are large"
        metric: square/sum_sq
        passes_if: ">= 100"
      - id: C3
        text: "a stage that does not exist yet"
        metric: later/score
        passes_if: "> 0"
        gated: false
    plots:
      - title: "Values per seed"
        kind: curve
        stage: square
        metric: value
      - title: "Sums"
        kind: bar
        metrics: [square/sum_sq, total/total]
    ---
    # prose for people
    """)


def write_claims(root, text=CLAIMS):
    path = root / "components" / M / "CLAIMS.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real smoke runs with different params: n = 3 (total 25), then n = 4."""
    root = tmp_path_factory.mktemp("report") / "proj"
    first = run_in_temp_project(M, root)
    second = run_in_temp_project(M, root, overrides={"data": {"n": 4}})
    write_claims(root)
    return first, second


def mlflow_runs(project):
    from mlflow import MlflowClient

    client = MlflowClient(project.tracking_uri)
    experiment = client.get_experiment_by_name(M)
    return client, client.search_runs([experiment.experiment_id], max_results=1000)


def test_criterion_comparisons():
    assert Criterion(id="a", text="", metric="s/k", passes_if=">= 1").passes(1.0)
    assert not Criterion(id="a", text="", metric="s/k", passes_if="< 0.5").passes(0.5)
    assert Criterion(id="a", text="", metric="s/k", passes_if="== 0.1").passes(0.1 + 1e-15)
    relative = Criterion(id="a", text="", metric="s/k", passes_if=">= s/base - 1.5")
    assert relative.reference == "s/base" and relative.threshold(80.0) == 78.5
    assert relative.passes(79.0, 80.0) and not relative.passes(78.0, 80.0)
    scaled = Criterion(id="a", text="", metric="s/k", passes_if="<= 0.75 * s/ece_erm")
    assert scaled.threshold(0.08) == pytest.approx(0.06) and scaled.passes(0.05, 0.08)
    for bad in ("about 1", ">= 1 +", "=> 2"):
        with pytest.raises(ValueError, match="operator and a number or metric"):
            Criterion(id="a", text="", metric="s/k", passes_if=bad)


def test_bad_front_matter_names_the_file_and_key(tmp_path):
    write_claims(tmp_path, CLAIMS.replace("passes_if: \">= 100\"", "passes_if: \"big\""))
    with pytest.raises(ClaimsError, match=r"(?s)CLAIMS.md.*criteria\.1\.passes_if"):
        load_claims(tmp_path, M)
    write_claims(tmp_path, "# no front matter\n")
    assert load_claims(tmp_path, M) is None


def test_run_metric_keys_map_back_to_stage_instances():
    method = Method(name="m", title="", config="x:y", stages=(
        Stage("train", "x:f", fan_out={"seed": "seeds"}),
        Stage("train_x", "x:f"),
    ))
    values = values_from_run_metrics(method, {"train_0/acc": 0.5, "train_x/acc": 0.7, "train_1/acc": 0.6})
    assert values == {("train", "0"): {"acc": 0.5}, ("train", "1"): {"acc": 0.6}, ("train_x", None): {"acc": 0.7}}


def test_scorecard_numbers_match_the_mlflow_records(runs, tmp_path):
    _, second = runs
    project = second.project
    reports = build(project, [registry.get(M)], "smoke", tmp_path / "out")
    report = reports[0]
    client, all_runs = mlflow_runs(project)
    parent = client.get_run(second.outcomes[0].parent_run_id)
    assert report.parent.info.run_id == parent.info.run_id        # the newest finished run
    children = {r.data.tags["item"]: r for r in all_runs
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id and r.data.tags["stage"] == "square"}
    sums = [children[k].data.metrics["sum_sq"] for k in ("0", "1")]
    assert sums == [14.0, 56.0]                                      # n = 4: 0+1+4+9, times (seed+1)^2
    c1, c2, c3 = report.verdicts
    assert c1.summary.mean == parent.data.metrics["total/total"] == 70.0
    assert c1.status == NOT_REPRODUCED                               # 70 != 25
    assert c2.summary.by_item == {"0": sums[0], "1": sums[1]} and c2.status == NOT_REPRODUCED
    assert c3.status == NOT_RUN
    assert report.verdict == f"0/2 {REPRODUCED}"
    provenance = {p.instance: p for p in report.provenance}
    assert provenance["square@1"].run_id == children["1"].info.run_id
    assert provenance["square@1"].stage_hash == children["1"].data.tags["dvc.stage_hash"]

    md = (tmp_path / "out" / "scorecard.md").read_text()
    assert parent.info.run_id in md and "(95% CI" in md
    assert sorted(p.name for p in (tmp_path / "out" / "plots").iterdir()) == [
        "toy_flow-sums.png", "toy_flow-values-per-seed.png"]
    page = (tmp_path / "out" / "scorecard.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "plots/" not in page


def test_profile_without_runs_is_not_run_yet(runs, tmp_path):
    report = build(runs[1].project, [registry.get(M)], "small", tmp_path)[0]
    assert report.parent is None and report.verdict == NOT_RUN
    assert "Not run yet with profile `small`" in (tmp_path / "scorecard.md").read_text()


def test_compare_two_chosen_runs_shows_differing_params_and_key_metrics(runs):
    from flows.runtime.compare import compare_runs

    first, second = runs
    ids = [first.outcomes[0].parent_run_id[:8], second.outcomes[0].parent_run_id[:8]]
    text = compare_runs(second.project, M, run_ids=ids)
    assert "params that differ: data.n" in text
    header, row_a, row_b = text.splitlines()[1:4]
    assert "total/total" in header and "square/sum_sq" in header
    assert row_a.split()[0] == ids[0] and " 25.0 " in f" {row_a} " and " 12.5 " in f" {row_a} "
    assert row_b.split()[0] == ids[1] and " 70.0 " in f" {row_b} " and " 35.0 " in f" {row_b} "
    with pytest.raises(SystemExit, match="matches 0 runs"):
        compare_runs(second.project, M, run_ids=["zzzz"])


def with_premise(threshold: str) -> str:
    """The toy claims plus a premise criterion on make_data's n."""
    premise = (f'  - id: P1\n    text: "enough data points"\n    metric: make_data/n\n'
               f'    passes_if: "{threshold}"\n    kind: premise\n')
    return CLAIMS.replace("criteria:\n", "criteria:\n" + premise, 1)


def test_failed_premise_makes_claims_inconclusive_everywhere(runs, tmp_path):
    from flows.runtime.compare import compare_runs
    from flows.runtime.results import INCONCLUSIVE, PREMISE_MET, PREMISE_NOT_MET

    first, second = runs
    root = second.project.root
    try:
        write_claims(root, with_premise(">= 10"))   # n = 4 in the latest run: not met
        report = build(second.project, [registry.get(M)], "smoke", tmp_path / "out")[0]
        p1, c1, c2, c3 = report.verdicts
        assert p1.status == PREMISE_NOT_MET
        assert c1.status == c2.status == INCONCLUSIVE   # they would read "not reproduced"
        assert c3.status == NOT_RUN
        assert report.verdict == "inconclusive (premise not met: P1)"
        md = (tmp_path / "out" / "scorecard.md").read_text()
        assert md.count(f"| {INCONCLUSIVE} |") == 2 and "(premise)" in md

        ids = [first.outcomes[0].parent_run_id[:8], second.outcomes[0].parent_run_id[:8]]
        assert compare_runs(second.project, M, run_ids=ids).count("inconclusive (premise not met: P1)") == 2

        readme_project = committed_small_metrics(tmp_path / "readme", n=4, total=70.0)
        assert "inconclusive (premise not met: P1)" in methods_table(readme_project, [registry.get(M)])

        write_claims(root, with_premise(">= 3"))    # met: the claims are judged as before
        report = build(second.project, [registry.get(M)], "smoke", tmp_path / "out")[0]
        assert report.verdicts[0].status == PREMISE_MET and report.verdicts[1].status == NOT_REPRODUCED
        assert report.verdict == f"0/2 {REPRODUCED}"
    finally:
        write_claims(root)


def committed_small_metrics(root, n: int, total: float):
    """What a checkout with the toy's committed small-run metrics holds (no runs needed)."""
    from components.common.io import write_json_atomic
    from flows.runtime.project import Project

    project = Project(root)
    project.method_dir(M).mkdir(parents=True)
    project.params_file(M).write_text("profile: small\n")
    write_json_atomic(project.metrics_file(M, "make_data"), {"n": n})
    write_json_atomic(project.metrics_file(M, "total"), {"total": total})
    write_claims(root, with_premise(">= 10"))
    return project


def test_readme_method_table_is_current():
    readme = (REPO_ROOT / "README.md").read_text()
    block = readme[readme.index(README_BEGIN) + len(README_BEGIN):readme.index(README_END)].strip()
    from flows.runtime.project import Project

    methods = [m for m in registry.all_methods() if m.name != M]
    assert block == methods_table(Project(REPO_ROOT), methods), \
        "README method table is stale: run `repro report --readme`"


# ------------------------------------------------------------------ the UI in a real browser

@pytest.fixture
def mlflow_ui(runs):
    """``repro ui`` on a free port of 127.0.0.1, in the toy project; stopped afterwards."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    project = runs[1].project
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "ui", "--port", str(port), "--prefect-port", "0"],
                            cwd=project.root, env={**os.environ, "REPRO_ROOT": str(project.root)})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"repro ui did not come up on {url}") from None
                time.sleep(1)
        yield url
    finally:
        from tests.runtime.test_records import alive, descendants

        spawned = descendants(proc.pid)             # mlflow ui and its uvicorn worker
        proc.terminate()                            # SIGTERM to `repro ui` alone
        proc.wait(timeout=60)
        time.sleep(1)
        assert spawned and not alive(spawned), f"left running after repro ui stopped: {alive(spawned)}"


def test_mlflow_ui_and_scorecard_render_in_chromium(runs, mlflow_ui, browser, tmp_path):
    from playwright.sync_api import expect

    client, all_runs = mlflow_runs(runs[1].project)
    experiment_id = client.get_experiment_by_name(M).experiment_id
    child = next(r for r in all_runs if r.data.tags.get("stage") == "square" and r.data.tags["item"] == "1")
    page = browser.new_page(viewport={"width": 1400, "height": 900})

    page.goto(f"{mlflow_ui}/#/experiments/{experiment_id}/runs")
    expect(page.get_by_text(f"{M}-smoke").first).to_be_visible(timeout=90_000)   # the parent runs
    page.screenshot(path=str(ARTIFACTS / "mlflow-experiment.png"))
    page.goto(f"{mlflow_ui}/#/experiments/{experiment_id}/runs/{child.info.run_id}")
    expect(page.get_by_text(f"{M} square seed=1 [smoke]").first).to_be_visible(timeout=90_000)
    page.screenshot(path=str(ARTIFACTS / "mlflow-stage-run.png"))

    build(runs[1].project, [registry.get(M)], "smoke", tmp_path / "card")
    page.goto((tmp_path / "card" / "scorecard.html").as_uri())
    expect(page.get_by_role("heading", name="Reproduction scorecard")).to_be_visible()
    images = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
    assert len(images) == 2 and all(done and width > 100 for done, width in images), images
    page.screenshot(path=str(ARTIFACTS / "scorecard.png"), full_page=True)


def test_committed_small_runs_used_the_pre_registered_seeds():
    """Regression (orbit, this session): a committed run was made on v1's seeds while CLAIMS.md
    pre-registered fresh ones; nothing noticed. The committed params must use CLAIMS' seeds."""
    import yaml

    for method in registry.all_methods():
        claims = load_claims(REPO_ROOT, method.name)
        params_file = REPO_ROOT / "data" / method.name / "params.yaml"
        if claims is None or not claims.seeds or not params_file.is_file():
            continue
        params = yaml.safe_load(params_file.read_text())
        if "seeds" in params:
            assert params["seeds"] == claims.seeds, f"{method.name}: {params_file} runs seeds {params['seeds']}, CLAIMS.md pre-registers {claims.seeds}"


def test_a_small_run_on_other_seeds_than_claims_pre_registers_says_so(tmp_path, capsys):
    from flows.runtime import runner
    from flows.runtime.testing import make_project

    project = make_project(tmp_path / "proj", ["linrnn"])
    capsys.readouterr()   # DVC's init message
    method = registry.get("linrnn")
    runner.warn_unregistered_seeds(project, method, "small", {"seeds": [0, 1, 2]})
    runner.warn_unregistered_seeds(project, method, "smoke", {"seeds": [7]})   # smoke is not judged
    assert capsys.readouterr().out == ""
    runner.warn_unregistered_seeds(project, method, "small", {"seeds": [7]})
    said = capsys.readouterr().out
    assert "linrnn: WARNING: seeds [7] are not the [0, 1, 2] that components/linrnn/CLAIMS.md pre-registers" in said
