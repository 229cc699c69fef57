"""Stage functions chained with LocalContext on a tiny config, plus config/profile checks."""
import pytest

from components.common.context import LocalContext
from components.common.io import read_json, read_table
from components.ioadam import data, memory, report, training
from components.ioadam.config import IOAdamConfig
from components.ioadam.tasks import split_of

TINY = {
    "seeds": [0],
    "digits": {"sizes": [64, 16, 10], "epochs": 1, "optimizers": ["adam", "ioadam_b2", "sgd"],
               "lr_grid": [1e-2]},
    "charlm": {"max_bytes": 8_000, "d_model": 16, "n_heads": 2, "n_layers": 1, "seq_len": 16,
               "batch_size": 4, "steps": 3, "sweep_steps": 2, "warmup": 1, "eval_windows": 8,
               "lr_grid": [1e-2]},
    "memory": {"optimizers": ["adam", "ioadam_b2", "ioadam_b2_ref"], "timed_steps": 1},
}


def _ctx(tmp_path, name, inputs=None, item=None):
    return LocalContext(out_dir=tmp_path / name, inputs=inputs or {}, item=item or {})


def _fan_out(tmp_path, stage_fn, cfg, name, items, inputs):
    outs = {}
    for item in items:
        key = "-".join(str(v) for v in item.values())
        ctx = _ctx(tmp_path, f"{name}/{key}", inputs, item)
        stage_fn(cfg, ctx)
        outs[key] = ctx.out_dir
    return outs


def test_stages_chain_end_to_end(tmp_path):
    cfg = IOAdamConfig.for_profile("smoke", TINY)
    digits_ctx, corpus_ctx = _ctx(tmp_path, "prepare_digits"), _ctx(tmp_path, "prepare_corpus")
    data.prepare_digits_stage(cfg, digits_ctx)
    data.prepare_corpus_stage(cfg, corpus_ctx)
    assert digits_ctx.summary["n_test"] > 300 and corpus_ctx.summary["bytes_val"] > 0
    inp = {"prepare_digits": digits_ctx.out_dir, "prepare_corpus": corpus_ctx.out_dir}

    opts = [{"optimizer": o} for o in cfg.digits.optimizers]
    inp["sweep_digits"] = _fan_out(tmp_path, training.sweep_digits_stage, cfg, "sweep_digits", opts, inp)
    runs = [{"optimizer": o, "seed": s} for o in cfg.digits.optimizers for s in cfg.seeds]
    inp["train_digits"] = _fan_out(tmp_path, training.train_digits_stage, cfg, "train_digits", runs, inp)
    lm_opts = [{"optimizer": o} for o in cfg.charlm.optimizers]
    inp["sweep_charlm"] = _fan_out(tmp_path, training.sweep_charlm_stage, cfg, "sweep_charlm", lm_opts, inp)
    lm_runs = [{"optimizer": o, "seed": s} for o in cfg.charlm.optimizers for s in cfg.charlm.seeds]
    inp["train_charlm"] = _fan_out(tmp_path, training.train_charlm_stage, cfg, "train_charlm", lm_runs, inp)

    mem_ctx = _ctx(tmp_path, "memory_profile")
    memory.memory_profile_stage(cfg, mem_ctx)
    eval_ctx = _ctx(tmp_path, "evaluate", inp)
    report.evaluate_stage(cfg, eval_ctx)
    cmp_ctx = _ctx(tmp_path, "compare", {"evaluate": eval_ctx.out_dir, "memory_profile": mem_ctx.out_dir})
    report.compare_stage(cfg, cmp_ctx)

    mem_rows = read_table(mem_ctx.out_dir / "memory.parquet").to_pylist()
    fused = next(r for r in mem_rows if r["task"] == "charlm" and r["optimizer"] == "ioadam_b2")
    ref = next(r for r in mem_rows if r["task"] == "charlm" and r["optimizer"] == "ioadam_b2_ref")
    assert fused["grad_bytes"] < ref["grad_bytes"]          # fused keeps no weight gradients
    assert all(r["state_bytes_matrix"] == r["formula_state_bytes_matrix"] for r in mem_rows)
    assert all(r["transient_peak_bytes"] > 0 for r in mem_rows)
    results = read_table(eval_ctx.out_dir / "results.parquet").to_pylist()
    assert len(results) == len(runs) + len(lm_runs)
    assert all(0 <= r["test"] <= 1 for r in results if r["task"] == "digits")
    rep = read_json(cmp_ctx.out_dir / "report.json")
    assert {"C1/digits/ioadam_b2", "C2/ioadam_b2", "C3/ioadam_b2", "C4/ioadam_b4"} <= set(rep["checks"])
    assert "all_pass" in cmp_ctx.summary and (cmp_ctx.out_dir / "quality_vs_memory.png").exists()


def test_profiles_validate_and_paper_needs_a_corpus(tmp_path):
    for profile in ("smoke", "small"):
        IOAdamConfig.for_profile(profile).preflight()
    with pytest.raises(FileNotFoundError, match="charlm.corpus_path"):
        IOAdamConfig.for_profile("paper").preflight()
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello " * 100)
    IOAdamConfig.for_profile("paper", {"charlm": {"corpus_path": str(corpus)}}).preflight()


def test_module_split_is_stable_and_disjoint():
    names = [f"pkg.mod{i}" for i in range(2000)]
    splits = [split_of(n, 0.1, 0.1) for n in names]
    assert splits == [split_of(n, 0.1, 0.1) for n in names]
    assert 0.07 < splits.count("val") / len(names) < 0.13
    assert 0.07 < splits.count("test") / len(names) < 0.13
