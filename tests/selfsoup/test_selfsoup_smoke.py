"""End-to-end smoke run of selfsoup (smoke profile) through the runtime, in a temp project."""
import math

import pytest

from components.common.io import read_json, read_table


@pytest.mark.smoke
def test_selfsoup_smoke_end_to_end(tmp_path):
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("selfsoup", tmp_path / "proj", profile="smoke")
    for stage in ("prepare_data", "report"):
        assert stage in " ".join(result.executed)

    table = read_table(result.out("selfsoup", "evaluate", "0") / "metrics.parquet").to_pandas()
    models = {"stock", "mae_lr1", "moco_t0p1", "selfsoup_clean", "selfsoup_shift", "uniform_soup", "greedy_soup"}
    # v10: the ingredients also with their heads refitted like the soups' (clean test only)
    assert set(table.model) == models | {"mae_lr1_refit", "moco_t0p1_refit"}
    assert set(table[table.model.str.endswith("_refit")].set) == {"clean"}
    assert table.acc.between(0, 1).all() and table.nll.map(math.isfinite).all()
    # clean + 8 corruptions x severities {1, 5} (+ the shift sets at severity 3)
    assert set(table[table.model == "stock"].set) >= {"clean", "gaussian_noise_1", "pixelate_5", "contrast_3",
                                                      "elastic_1", "elastic_5"}

    season = read_json(result.out("selfsoup", "self_season", "0") / "season.json")
    assert abs(sum(season["weights"].values()) - 1) < 1e-6

    report = read_json(result.out("selfsoup", "report") / "report.json")
    assert {"premise", "a", "a_own_head", "c", "d", "per_corruption"} <= report.keys()
    assert len(report["per_corruption"]) == 8
    metrics = result.metrics("selfsoup", "report")
    assert all(isinstance(metrics[f"pass_{c}"], bool) for c in "abcd")
    # (the different-init control barrier needs two seeds; smoke has one)
    for key in ("premise_distance_min", "premise_barrier_mean", "premise_encoder_barrier_mean", "premise_ingredient_minus_stock_val_min",
                "acc_elastic_selfsoup_shift", "shift_minus_selfsoup_clean_shift_sets"):
        assert math.isfinite(metrics[key]), key


@pytest.mark.smoke
def test_selfsoup_stage_functions_chain_with_local_context(tmp_path):
    """The same DAG driven in-process with LocalContext: checks the stage contract without
    the runtime (inputs layout, item keys, only declared params are read)."""
    from components.selfsoup.config import SelfsoupConfig
    from flows.selfsoup import METHOD
    from tests.selfsoup.chain import run_chain

    summaries = run_chain(METHOD, SelfsoupConfig.for_profile("smoke"), tmp_path)
    assert summaries["fine_tune/0"]["selfsoup_shift_val_acc"] >= 0
    assert abs(sum(v for k, v in summaries["self_season/0"].items() if k.startswith("weight_")) - 1) < 1e-6
    assert {"pass_a", "pass_b", "pass_c", "pass_d", "premise_barrier_mean"} <= summaries["report"].keys()
    table = read_table(tmp_path / "evaluate" / "0" / "metrics.parquet").to_pandas()
    assert table.acc.between(0, 1).all()
    _premises_never_read_test(METHOD, SelfsoupConfig.for_profile("smoke"), tmp_path)


def _premises_never_read_test(method, config, root):
    """The soup stage's premise measurements (distances, barriers) run with the test split
    removed from the data; they used to be measured on test."""
    from components.common.context import LocalContext
    from components.common.io import load_torch, save_torch
    from flows.runtime.dag import DeclaredParams

    splits = load_torch(root / "prepare_data" / "out" / "splits.pt")
    del splits["test"]
    save_torch(root / "no_test" / "splits.pt", splits)
    stage = next(s for s in method.stages if s.name == "soup")
    inputs = {"prepare_data": root / "no_test", "pretrain_stock": {"0": root / "pretrain_stock" / "0"},
              "fine_tune": {p.name: p for p in (root / "fine_tune").iterdir()}}
    ctx = LocalContext(out_dir=root / "soup_without_test", inputs=inputs, item={"seed": 0})
    stage.load()(DeclaredParams(config, stage.params, "soup"), ctx)
    assert ctx.summary["barrier_mean"] == read_json(root / "soup" / "0" / "soup.json")["barriers"]["mae_lr1__moco_t0p1"]
