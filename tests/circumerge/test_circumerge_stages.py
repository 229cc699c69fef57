"""Stage functions driven directly with LocalContext on tiny synthetic adapters (no training)."""
import torch

from components.circumerge.config import CircumergeConfig
from components.circumerge.merge import merge_stage
from components.circumerge.evaluate import alphas_at_edge
from components.circumerge.timing import fidelity, synthetic_factors, timing_benchmark_stage
from components.common.context import LocalContext
from components.common.io import load_torch, read_json, read_table, save_torch
from flows.circumerge import METHOD
from flows.runtime.dag import DeclaredParams


def declared(cfg, stage):
    """The config as the runtime shows it to ``stage``: only its declared params."""
    return DeclaredParams(cfg, METHOD.stage(stage).params, stage)


def fake_adapters(root, tasks, layers, m=20, n=16, r=4):
    gen = torch.Generator().manual_seed(0)
    for task in tasks:
        factors = {name: {"B": torch.randn(m, r, generator=gen), "A": torch.randn(r, n, generator=gen)}
                   for name in layers}
        save_torch(root / task / "adapter.pt", {"task": task, "layers": layers, "factors": factors})
    return {t: root / t for t in tasks}


def test_merge_stage_writes_every_space_rule_and_seed(tmp_path):
    cfg = CircumergeConfig.for_profile("smoke", {"seeds": [0, 1], "merge": {"repeats": 1}})
    inputs = fake_adapters(tmp_path / "adapters", list(cfg.data.tasks), ["fc1", "fc2"])
    ctx = LocalContext(tmp_path / "merge", inputs={"train_adapters": inputs})
    merge_stage(declared(cfg, "merge"), ctx)
    table = read_table(ctx.out_dir / "merges.parquet").to_pandas().set_index("key")
    assert len(table) == 3 + 3 + 3 * 2
    assert table.loc["circumerge-ta-1", "rel_err_vs_core"] < 1e-5  # TA is lossless everywhere
    assert table.loc["core-ta", "adapter_rank"] == 12 and table.loc["full-ta", "adapter_rank"] == -1
    merged = load_torch(ctx.out_dir / "merged" / "core-ta.pt")
    full = load_torch(ctx.out_dir / "merged" / "full-ta.pt")
    assert torch.allclose(merged["deltas"]["fc1"], full["deltas"]["fc1"], atol=1e-3)
    assert read_json(ctx.out_dir / "merges.json")["label"] == "CircuMerge (our instantiation)"
    assert "merge_time_s/core-tsv" in ctx.summary


def test_timing_stage_reports_ratio_per_rule_and_thread_count_and_restores_threads(tmp_path):
    cfg = CircumergeConfig.for_profile("smoke", {"timing": {"dim": 128, "n_tasks": 2, "rank": 4,
                                                            "repeats": 1, "threads": [1, 2]}})
    threads = torch.get_num_threads()
    ctx = LocalContext(tmp_path / "timing")
    timing_benchmark_stage(declared(cfg, "timing_benchmark"), ctx)
    assert torch.get_num_threads() == threads
    timing = read_json(ctx.out_dir / "timing.json")
    assert set(timing["threads"]) == {"1", "2"}
    for table in timing["threads"].values():
        assert set(table) == {"ta", "ties", "tsv"}
        for row in table.values():
            assert row["ratio"] > 0 and row["core_s"] > 0 and row["core_qr_s"] > 0
    assert "ratio/tsv/t2" in ctx.summary and "fidelity/ties" in ctx.summary


def test_time_ratio_is_against_the_faster_core_space_basis(tmp_path):
    # the first version divided by Core Space with SVD bases only, although QR bases are cheaper
    cfg = CircumergeConfig.for_profile("smoke", {"timing": {"dim": 128, "n_tasks": 2, "rank": 4,
                                                            "repeats": 1, "threads": [1]}})
    ctx = LocalContext(tmp_path / "timing")
    timing_benchmark_stage(declared(cfg, "timing_benchmark"), ctx)
    for row in read_json(ctx.out_dir / "timing.json")["threads"]["1"].values():
        assert row["ratio"] == row["circumerge_s"] / min(row["core_s"], row["core_qr_s"])


def test_fidelity_is_zero_for_task_arithmetic_and_without_sampling():
    cfg = CircumergeConfig.for_profile("smoke")
    layers = [synthetic_factors(3, 96, 80, 4, seed=s) for s in range(2)]
    sampled = fidelity(layers, ["ta", "tsv"], cfg.merge, seed=0)
    assert sampled["ta"]["circumerge_vs_core"] < 1e-5           # exact by construction
    assert sampled["tsv"]["core_qr_vs_core"] < 1e-5             # TSV is basis-invariant
    unsampled = CircumergeConfig.for_profile("smoke", {"merge": {"sketch_factor": None}})
    exact = fidelity(layers, ["ta", "ties", "tsv"], unsampled.merge, seed=0)
    assert all(f["circumerge_vs_core"] < 1e-4 for f in exact.values())


def test_alphas_at_edge_counts_both_ends_of_the_grid():
    grid = [0.1, 0.3, 1.0]
    assert alphas_at_edge({"a": 0.1, "b": 0.3, "c": 1.0}, grid) == 2
    assert alphas_at_edge({"a": 0.3}, grid) == 0


def test_minilm_split_of_the_shared_encoder_equals_the_whole_encoder():
    import torch.nn.functional as F

    from components.circumerge.models import split_minilm
    from components.common.minilm import load_minilm, mean_pool, tokenize

    lower, upper = split_minilm(3)
    ids, mask = tokenize(["the chef saw the lovely cake.", "does my friend see the game?"], 24)
    with torch.no_grad():
        split = upper(lower(ids, mask), mask)
        whole = F.normalize(mean_pool(load_minilm().hidden_states(ids, mask)[-1], mask), dim=-1)
    assert torch.allclose(split, whole, atol=1e-6)
    assert len(upper.layer) == 3 and not any(p.requires_grad for p in upper.parameters())


def test_profiles_validate_and_paper_preflight_names_the_missing_key():
    import pytest

    for profile in ("smoke", "small"):
        CircumergeConfig.for_profile(profile).preflight()
    with pytest.raises(FileNotFoundError, match="paper.vision_model"):
        CircumergeConfig.for_profile("paper").preflight()


def test_task_arithmetic_is_reported_not_gated():
    """Regression: ``claims.gated_rules`` was declared but unused, so TA (exact in any sketched
    space, it cannot fail) still got accuracy and fidelity pass flags like TIES and TSV."""
    from components.circumerge.evaluate import _summary_metrics, accuracy_verdicts, timing_verdicts

    table = {"space": ["core", "circumerge", "core", "circumerge"], "rule": ["ta", "ta", "ties", "ties"],
             "normalised_acc": [90.0, 90.0, 80.0, 78.5]}
    timing = {"fidelity": {"ta": {"circumerge_vs_core": 1e-6}, "ties": {"circumerge_vs_core": 0.05}},
              "threads": {"1": {"ta": {"ratio": 0.5}, "ties": {"ratio": 0.9}}}}
    gated = CircumergeConfig.for_profile("small").claims.gated_rules
    verdicts = {"accuracy": accuracy_verdicts(table, ["ta", "ties"], 1.0, gated),
                "timing": timing_verdicts(timing, 0.7, 0.1, gated)}
    assert verdicts["accuracy"]["ties"]["pass"] is False and verdicts["accuracy"]["ties"]["gated"]
    assert "pass" not in verdicts["accuracy"]["ta"] and not verdicts["accuracy"]["ta"]["gated"]
    metrics = _summary_metrics(table, verdicts)
    assert metrics["acc_gap/ta"] == 0.0 and metrics["fidelity/ta"] == 1e-6   # still reported
    assert "pass_accuracy/ta" not in metrics and "pass_fidelity/ta" not in metrics
    assert metrics["pass_accuracy/ties"] is False and metrics["pass_fidelity/ties"] is True
    # merge time is gated for every rule, TA included (C3-TA-*)
    assert metrics["pass_timing/ta/t1"] is True and metrics["pass_timing/ties/t1"] is False


def test_merges_scored_in_worker_processes_equal_the_serial_loop_bit_for_bit(tmp_path):
    """tune_alpha and evaluate spread (merge, alpha, tasks) units over single-threaded worker
    processes in the small profile; the accuracies must not depend on that."""
    from components.circumerge.evaluate import score_merges
    from components.circumerge.tasks import prepare_tasks_stage

    cfg = CircumergeConfig.for_profile("smoke", {"model": {"digits_pretrain_steps": 20}})
    tasks = list(cfg.data.tasks)
    prep = LocalContext(tmp_path / "prepare_tasks")
    prepare_tasks_stage(declared(cfg, "prepare_tasks"), prep)
    gen = torch.Generator().manual_seed(0)
    for key in ("a", "b"):
        deltas = {"fc1": torch.randn(64, 64, generator=gen), "fc2": torch.randn(64, 64, generator=gen)}
        save_torch(tmp_path / "merge" / "merged" / f"{key}.pt", {"deltas": deltas})
    ctx = LocalContext(tmp_path / "out", inputs={"prepare_tasks": prep.out_dir, "merge": tmp_path / "merge"})
    units = [(key, alpha, tuple(tasks)) for key in ("a", "b") for alpha in (0.05, 0.5)]
    units += [("b", 0.1, (t,)) for t in tasks]
    serial = list(score_merges(ctx, "digits", tasks, units, "val", processes=1))
    pooled = list(score_merges(ctx, "digits", tasks, units, "val", processes=2))
    assert pooled == serial
    assert len({tuple(acc.values()) for acc in serial[:4]}) > 1   # the merges do differ
