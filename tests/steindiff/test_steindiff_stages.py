"""Stage functions chained with LocalContext (no runtime), on a tiny config, reading params
only through the declared keys (DeclaredParams), exactly as the runtime would."""
import json
import math

import pytest

from components.common.context import LocalContext
from components.common.io import read_json, read_table
from components.steindiff.config import SteindiffConfig
from flows.runtime.dag import DeclaredParams
from flows.steindiff import METHOD

TINY = {
    "seeds": [0],
    "data": {"n_reference": 300},
    "denoiser": {"steps": 30, "width": 32, "emb_dim": 16, "warmup": 5, "batch_size": 64},
    "feature_net": {"steps": 30, "hidden": 32, "feature_dim": 8},
    "sample": {"solvers": ["heun"], "steps": [3, 4, 5], "n_mixture": 300, "n_digits": 64},
    "evaluate": {"n_projections": 32, "mmd_max_points": 100},
    "verify": {"n_mc": 20_000, "hutchinson_probes": 2000, "n_particles": 3000},
}


def run_chain(cfg, root):
    """Run every stage in declaration order; fan-out instances get ``{item_key: Path}``."""
    outs, contexts = {}, {}
    for stage in METHOD.stages:
        params = DeclaredParams(cfg, stage.params, stage.name)
        inputs = {dep: outs[dep] for dep in stage.deps}
        items = stage.fan_out_items(cfg) if stage.fan_out else {None: {}}
        outs[stage.name] = {}
        for key, item in items.items():
            name = f"{stage.name}@{key}" if key else stage.name
            ctx = LocalContext(out_dir=root / name, inputs=inputs, item=item)
            stage.load()(params, ctx)
            contexts[name] = ctx
            outs[stage.name][key] = ctx.out_dir
        if not stage.fan_out:
            outs[stage.name] = outs[stage.name][None]
    return outs, contexts


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    cfg = SteindiffConfig.for_profile("smoke", TINY)
    return run_chain(cfg, tmp_path_factory.mktemp("steindiff"))


def test_profiles_validate_and_paper_preflight():
    for profile in ("smoke", "small", "paper"):
        SteindiffConfig.for_profile(profile)
    SteindiffConfig.for_profile("small").preflight()
    # the paper path's own checks are in test_steindiff_paper.py
    with pytest.raises(FileNotFoundError, match="paper.checkpoint"):
        SteindiffConfig.for_profile("paper").preflight()
    with pytest.raises(Exception):
        SteindiffConfig.for_profile("small", {"sample": {"stein": {"coupling": "bogus"}}})


def test_chain_outputs_are_valid(chain):
    outs, contexts = chain
    checks = read_json(outs["verify_stein"] / "stein_identity.json")
    assert all(rec["passed"] for rec in checks.values())

    runs = read_json(outs["sample_mixture"]["heun-0"] / "runs.json")
    arms = ("none", "stein", "stein_stepwise")
    # the oracle runs only on its own budgets (smoke: N = 3, 5)
    assert {(r["steps"], r["correction"]) for r in runs} == {
        (n, c) for n in (3, 4, 5) for c in arms} | {(3, "oracle"), (5, "oracle")}
    gammas = read_table(outs["sample_mixture"]["heun-0"] / "gammas.parquet").to_pandas()
    inner = gammas[gammas.sigma_next > 0]
    assert inner[inner.correction == "stein_stepwise"].gamma.between(0.5, 1.5).all()
    assert (inner[inner.correction == "stein"].gamma >= 0.5).all()     # lower clip only
    assert (gammas[gammas.sigma_next == 0].gamma == 1.0).all()   # last step never corrected
    oracle_budgets = inner[inner.correction != "none"].steps.isin([3, 5])
    assert inner[oracle_budgets].gamma_oracle.notna().all()
    assert inner[~oracle_budgets].gamma_oracle.isna().all()
    logged = {name for name, *_ in contexts["sample_mixture@heun-0"].history}
    assert {"gamma/N3_stein", "gamma_over_oracle/N3_stein", "gamma/N3_oracle"} <= logged
    digit_runs = read_json(outs["sample_digits"]["heun-0"] / "runs.json")
    assert {r["steps"] for r in digit_runs if r["correction"] == "oracle"} == {3}

    metrics = read_table(outs["evaluate"] / "metrics.parquet").to_pandas()
    runs_only = metrics[metrics.solver != "true_samples"]
    assert set(runs_only.dataset) == {"mixture", "digits"}
    assert runs_only[runs_only.dataset == "mixture"].sw2.map(math.isfinite).all()
    assert runs_only[runs_only.dataset == "digits"].fd.map(math.isfinite).all()

    crit = read_json(outs["report"] / "criteria.json")
    assert set(crit["C1_sw2_ratio"]) == {"3", "4", "5"} and crit["C1_pass"] in (True, False)
    assert set(crit["P1_oracle_ratio_val"]) == {"3", "5"}        # no oracle at N = 4 here
    assert set(crit["P1_gated_budgets"]) <= {3, 5}
    assert crit["C3_pass"] in (True, False) and set(crit["P3_gated_budgets"]) <= {3}
    assert set(crit["clip_frac"]["stein"]["mixture"]) == {"3", "4", "5"}
    assert "gamma_oracle" in (outs["report"] / "report.md").read_text()
    assert (outs["report"] / "report.md").read_text().count("| heun |") >= 3
    json.dumps(crit, allow_nan=False)   # strict JSON: no NaN leaks into the criteria


def test_verify_stage_fails_run_when_identity_is_off(tmp_path, monkeypatch, chain):
    import components.steindiff.verify as verify

    outs, _ = chain
    cfg = SteindiffConfig.for_profile("smoke", TINY)
    monkeypatch.setattr(verify, "check_audit_gamma",
                        lambda n, seed: {"audit_direct_vs_stein": verify._record(1.0, 0.0, 0.01)})
    ctx = LocalContext(out_dir=tmp_path / "v", inputs={"prepare_data": outs["prepare_data"]})
    with pytest.raises(RuntimeError, match="audit_direct_vs_stein"):
        verify.verify_stein_stage(DeclaredParams(cfg, ("verify",), "verify_stein"), ctx)
