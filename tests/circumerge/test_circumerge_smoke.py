"""End-to-end smoke run of circumerge (digits-MLP variant) through the runtime, in a temp project."""
import math

import pytest
import torch

from components.common.io import load_torch, read_json, read_table


@pytest.mark.smoke
def test_circumerge_smoke_end_to_end(tmp_path):
    from flows.runtime.testing import run_in_temp_project

    result = run_in_temp_project("circumerge", tmp_path / "proj", profile="smoke")
    executed = " ".join(result.executed)
    for stage in ("prepare_tasks", "train_adapters", "merge", "tune_alpha", "timing_benchmark", "evaluate"):
        assert stage in executed

    for task in ("permuted", "flipped", "rotated"):
        acc = result.metrics("circumerge", "train_adapters", task)
        assert 0 <= acc["zero_shot_test_acc"] <= 100 and acc["val_acc"] > acc["zero_shot_val_acc"]

    merges = read_table(result.out("circumerge", "merge") / "merges.parquet").to_pandas()
    assert len(merges) == 3 * 3  # {full, core, circumerge(seed 0)} x {ta, ties, tsv}
    assert (merges.merge_time_s > 0).all() and merges.erank_merged.map(math.isfinite).all()
    # low-rank spaces return a standard adapter of rank T * r = 3 * 4
    assert set(merges[merges.space != "full"].adapter_rank) == {12}
    # TA is lossless in Core Space and in CircuMerge's sketched core space
    ta = merges[merges.rule == "ta"].set_index("space")
    assert ta.loc["circumerge", "rel_err_vs_core"] < 1e-5
    saved = load_torch(result.out("circumerge", "merge") / "merged" / "circumerge-ties-0.pt")
    b, a = next(iter(saved["adapters"].values()))
    assert b.shape[1] == a.shape[0] == 12

    results = read_table(result.out("circumerge", "evaluate") / "results.parquet").to_pandas()
    assert results.normalised_acc.between(0, 200).all()
    assert set(results.alpha) <= {0.5, 1.0}
    claims = read_json(result.out("circumerge", "evaluate") / "claims.json")
    assert claims["label"] == "CircuMerge (our instantiation)"
    assert set(claims["accuracy"]) == set(claims["timing"]) == {"ta", "ties", "tsv"}
    metrics = result.metrics("circumerge", "evaluate")
    for rule in ("ta", "ties", "tsv"):
        assert isinstance(metrics[f"pass_timing/{rule}/t1"], bool)
        assert 0 <= metrics[f"fidelity/{rule}"] < 10
    for rule in ("ties", "tsv"):   # TA is reported, not gated (claims.gated_rules)
        assert isinstance(metrics[f"pass_accuracy/{rule}"], bool)
        assert isinstance(metrics[f"pass_fidelity/{rule}"], bool)
    assert "pass_accuracy/ta" not in metrics and "acc_gap/ta" in metrics
    assert metrics["fidelity/ta"] < 1e-4  # TA is exact in the sketched space
    timing = result.metrics("circumerge", "timing_benchmark")
    assert 0 < timing["sketch_fraction"] <= 1
    assert "n_alpha_at_edge" in result.metrics("circumerge", "tune_alpha")

    # run-to-run identity: the run trained the three adapters side by side, each in a worker
    # (v1's results moved between identical runs when fan-out items shared one process's RNG under
    # threads); one of them re-run alone, as `repro exec` runs it, must come out bit for bit the same
    from flows.runtime.execute import run_stage

    task = "permuted"
    first = result.metrics("circumerge", "train_adapters", task)
    factors = load_torch(result.out("circumerge", "train_adapters", task) / "adapter.pt")["factors"]
    run_stage(result.project, "circumerge", "train_adapters", task)
    assert result.metrics("circumerge", "train_adapters", task) == first
    again = load_torch(result.out("circumerge", "train_adapters", task) / "adapter.pt")["factors"]
    assert again.keys() == factors.keys()
    assert all(torch.equal(again[n][k], factors[n][k]) for n in again for k in ("A", "B"))
