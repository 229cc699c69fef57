"""Stage functions called directly with LocalContext on a tiny synthetic corpus."""
import math

import pytest
import torch

from components.common.context import LocalContext
from components.common.io import read_json, read_table, write_json_atomic
from components.dagmoe.compare import against_plain_moe, compare_stage, judge
from components.dagmoe.config import DagmoeConfig
from components.dagmoe.corpus import (SMALL_EVAL_SETS, ByteTokenizer, _docstrings_of, held_out,
                                      language_reference_texts, load_tokens, split_stdlib,
                                      write_tokens)
from components.dagmoe.evaluate import analyze_routing_stage, evaluate_stage
from components.dagmoe.train import curve_flatness, random_windows, train_stage

TINY = {"seeds": [0, 1],
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "context": 8, "n_experts": 4,
                  "d_expert": 16, "d_graph": 4},
        "train": {"steps": 6, "batch_size": 4, "warmup": 1, "log_every": 3, "curve_every": 3,
                  "curve_tokens": 80},
        "eval": {"max_tokens": 200, "batch_size": 8, "throughput_batches": 1}}


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def corpus_dir(tmp_path):
    """A byte-level corpus written in the layout build_corpus produces."""
    out = tmp_path / "build_corpus"
    tok = ByteTokenizer()
    texts = {"train": ["Return the sum of a and b."] * 30, "val_id": ["Open a file."] * 20,
             "val_ood": ["The while statement repeats."] * 20}
    for name, docs in texts.items():
        write_tokens(out / f"{name}.bin", tok.encode_documents(docs))
    write_json_atomic(out / "meta.json", {"vocab_size": tok.vocab_size, "eval_sets": SMALL_EVAL_SETS})
    return out


def test_module_split_is_deterministic_and_disjoint():
    by_module = {f"mod{i}": [f"doc {i}"] for i in range(200)}
    train, val, train_mods, val_mods = split_stdlib(by_module, 0.1, "dagmoe")
    assert not set(train_mods) & set(val_mods) and len(val_mods) + len(train_mods) == 200
    assert 5 <= len(val_mods) <= 40
    assert held_out("mod3", 0.1, "dagmoe") == held_out("mod3", 0.1, "dagmoe")


def test_docstrings_are_read_without_importing(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('"""Module doc."""\nprint("side effect")\nclass A:\n    """Class doc."""\n'
                   '    def f(self):\n        """Method doc."""\n')
    assert _docstrings_of(src) == ["Module doc.", "Class doc.", "Method doc."]
    texts = language_reference_texts()
    assert len(texts) > 20 and texts[-1].startswith("The Zen of Python")


def test_byte_tokenizer_separates_documents():
    ids = ByteTokenizer().encode_documents(["ab", "c"])
    assert ids.tolist() == [97, 98, 256, 99, 256]


def test_batches_depend_only_on_seed():
    tokens = torch.arange(500)
    a, b = random_windows(tokens, 8, 4, seed=3), random_windows(tokens, 8, 4, seed=3)
    torch.manual_seed(123)  # global RNG use (e.g. a different model init) must not matter
    x1, y1 = next(a)
    x2, y2 = next(b)
    assert torch.equal(x1, x2) and torch.equal(y1[:, :-1], x1[:, 1:])


def test_judge_requires_every_seed_and_reports_criteria():
    rows = [{"variant": v, "seed": s, "val_id_loss": base - d, "val_ood_loss": base + 1 - d}
            for s in (0, 1, 2) for v, d in (("moe_shared", 0.0), ("dag_moe", 0.05)) for base in [3.0]]
    result = judge(rows, [0, 1, 2], 0.005, 0.002)
    assert result["criteria"]["C1_wins_all_seeds_both_splits"] and result["criteria"]["reproduced"]
    assert result["splits"]["val_id"]["paired"]["wins"] == 3
    rows[1]["val_id_loss"] = 3.5  # DAG-MoE loses on seed 0 in-domain
    assert not judge(rows, [0, 1, 2], 0.005, 0.002)["criteria"]["C1_wins_all_seeds_both_splits"]
    with pytest.raises(ValueError, match="seeds"):
        judge(rows, [0, 1, 2, 3], 0.005, 0.002)


def test_premise_compares_shared_expert_with_plain_moe_per_seed():
    losses = {"moe": [3.0, 3.1, 3.2], "moe_shared": [2.9, 3.05, 3.25], "dag_moe": [2.8, 3.0, 3.1]}
    rows = [{"variant": v, "seed": s, "val_id_loss": losses[v][s], "val_ood_loss": losses[v][s] + 1}
            for v in losses for s in range(3)]
    out = against_plain_moe(rows, [0, 1, 2])
    assert out["shared_vs_plain/val_id_wins"] == 2  # seed 2: the shared expert is worse
    assert out["shared_vs_plain/val_id_gain_mean"] == pytest.approx((0.1 + 0.05 - 0.05) / 3)
    assert out["dag_vs_plain/val_ood_wins"] == 3
    assert against_plain_moe([r for r in rows if r["variant"] != "moe"], [0, 1, 2]) == {}
    with pytest.raises(ValueError, match="seeds"):
        against_plain_moe(rows, [0, 1, 2, 3])


def test_curve_flatness_measures_the_last_quarter():
    records = [{"step": s, "train/val_id_loss": 5.0 - 0.01 * s} for s in range(100, 900, 100)]
    out = curve_flatness(records, "train/val_id_loss")
    # losses 4.0 (step 100) ... -1.0 (step 600 = 3/4 of 800) ... -3.0 (step 800)
    assert out["val_curve_last_quarter_drop"] == pytest.approx(2.0)
    assert out["val_curve_last_quarter_share"] == pytest.approx(2.0 / 7.0)
    assert curve_flatness(records[:2], "train/val_id_loss") == {}


def test_stages_chain_on_a_tiny_corpus(tmp_path, corpus_dir):
    cfg = DagmoeConfig.for_profile("smoke", TINY)
    runs = {}
    for variant in cfg.train.variants:
        for seed in cfg.seeds:
            key = f"{variant}-{seed}"
            ctx = LocalContext(out_dir=tmp_path / "train" / key, inputs={"build_corpus": corpus_dir},
                               item={"variant": variant, "seed": seed})
            train_stage(cfg, ctx)
            assert math.isfinite(ctx.summary["train_loss_final"])
            assert ctx.summary["param_gap_dag_vs_shared"] <= 0.05
            assert [step for name, _, step, _ in ctx.history if name == "train/val_id_loss"] == [3, 6]
            runs[key] = ctx.out_dir
    inputs = {"build_corpus": corpus_dir, "train": runs}
    ev = LocalContext(out_dir=tmp_path / "evaluate", inputs=inputs)
    evaluate_stage(cfg, ev)
    table = read_table(ev.out_dir / "evaluation.parquet").to_pylist()
    assert len(table) == 6 and all(math.isfinite(r["val_ood_loss"]) for r in table)
    an = LocalContext(out_dir=tmp_path / "analyze_routing", inputs=inputs)
    analyze_routing_stage(cfg, an)
    routing = read_json(an.out_dir / "routing.json")
    layer = routing["runs"]["dag_moe-0"]["layers"][0]
    assert sum(layer["load"]) == pytest.approx(1.0) and 0 < layer["round0"]["mean_gate"] < 1
    cmp = LocalContext(out_dir=tmp_path / "compare",
                       inputs={"evaluate": ev.out_dir, "analyze_routing": an.out_dir})
    compare_stage(cfg, cmp)
    assert set(cmp.summary) >= {"C1_wins_all_seeds_both_splits", "C2_mean_rel_improvement",
                                "reproduced", "shared_vs_plain/val_id_gain_mean"}


def test_profiles_validate_and_paper_preflight_names_missing_input():
    for profile in ("smoke", "small", "paper"):
        DagmoeConfig.for_profile(profile)
    DagmoeConfig.for_profile("small").preflight()
    with pytest.raises(FileNotFoundError, match="corpus.train_files"):
        DagmoeConfig.for_profile("small", {"corpus": {"source": "files"}}).preflight()
    with pytest.raises(FileNotFoundError, match="paper.pile_root"):
        DagmoeConfig.for_profile("paper").preflight()


def test_train_metrics_are_identical_for_the_same_params_and_seed(tmp_path, corpus_dir):
    """Metrics files hold only what params + seed determine (timings go to MLflow only)."""
    cfg = DagmoeConfig.for_profile("smoke", TINY)
    summaries = []
    for run in ("a", "b"):
        torch.manual_seed(len(run) * 7 + ord(run))  # a different global RNG state must not matter
        ctx = LocalContext(out_dir=tmp_path / run, inputs={"build_corpus": corpus_dir},
                           item={"variant": "dag_moe", "seed": 1})
        train_stage(cfg, ctx)
        summaries.append(ctx.summary)
    assert summaries[0] == summaries[1] and "seconds" not in summaries[0]


def test_memory_mapped_tokens_give_the_same_windows_as_a_tensor(tmp_path):
    """The corpus moved from .pt tensors to int32 memory maps: same batches, same eval windows."""
    from components.dagmoe.corpus import load_tokens
    from components.dagmoe.train import eval_windows

    ids = torch.randint(0, 1000, (777,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    write_tokens(tmp_path / "train.bin", ids.numpy())
    mapped = load_tokens(tmp_path, "train")
    for (x1, y1), (x2, y2), _ in zip(random_windows(ids, 8, 4, seed=5), random_windows(mapped, 8, 4, seed=5),
                                     range(3)):
        assert x2.dtype == torch.int64 and torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(eval_windows(ids, 8, 100), eval_windows(mapped, 8, 100))


def test_replicas_split_each_batch_into_contiguous_row_shares():
    tokens = torch.arange(1000)
    (full, _), = [next(random_windows(tokens, 8, 6, seed=1))]
    shares = [next(random_windows(tokens, 8, 6, seed=1, rank=r, world=3))[0] for r in range(3)]
    assert torch.equal(torch.cat(shares), full)
    with pytest.raises(ValueError, match="divisible"):
        next(random_windows(tokens, 8, 6, seed=1, rank=0, world=4))


def test_two_data_parallel_replicas_train_the_model_one_process_trains(tmp_path, corpus_dir):
    """DDP (gloo on CPU, a child interpreter as rank 1) averages the two halves' gradients,
    which is the full batch's gradient when every loss term is a per-token mean: with the
    load-balance term (a product of batch statistics) switched off, the models agree."""
    from components.dagmoe.evaluate import load_trained
    from components.dagmoe.model import mean_loss
    from components.dagmoe.train import eval_windows

    sizes = {**TINY, "train": {**TINY["train"], "load_balance_coef": 0.0}}
    windows = eval_windows(load_tokens(corpus_dir, "val_id"), 8, 200)
    losses = {}
    for world in (1, 2):
        cfg = DagmoeConfig.for_profile("smoke", {**sizes, "train": {**sizes["train"], "world_size": world}})
        ctx = LocalContext(out_dir=tmp_path / f"w{world}", inputs={"build_corpus": corpus_dir},
                           item={"variant": "dag_moe", "seed": 0})
        train_stage(cfg, ctx)
        assert read_json(ctx.out_dir / "summary.json")["world_size"] == world
        losses[world] = mean_loss(load_trained(ctx.out_dir)[0], windows, 8)
    assert losses[2] == pytest.approx(losses[1], abs=1e-4)


def test_a_replica_that_dies_before_the_rendezvous_fails_the_run_at_once(tmp_path, corpus_dir,
                                                                          monkeypatch):
    """Regression: rank 0 used to join the rendezvous whatever its children did, so a child that
    died on start-up left it waiting for the 30-minute DDP timeout. Now it waits for each
    child's ready file and raises when a child exits first."""
    import subprocess
    import sys
    import time
    from datetime import timedelta

    from components.dagmoe import train as train_module

    def broken_replica(cfg, corpus, item, rank, world, rendezvous, tmp):
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    monkeypatch.setattr(train_module, "_start_replica", broken_replica)
    monkeypatch.setattr(train_module, "DDP_TIMEOUT", timedelta(seconds=5))  # old code: fail, not hang
    cfg = DagmoeConfig.for_profile("smoke", {**TINY, "train": {**TINY["train"], "world_size": 2}})
    ctx = LocalContext(out_dir=tmp_path / "w2", inputs={"build_corpus": corpus_dir},
                       item={"variant": "moe", "seed": 0})
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="replica 1 exited with code 3 before the rendezvous"):
        train_stage(cfg, ctx)
    assert time.monotonic() - start < 30


def test_await_replicas_returns_once_every_child_is_ready(tmp_path):
    import subprocess
    import sys

    from components.dagmoe.train import await_replicas, ready_file

    children = [subprocess.Popen([sys.executable, "-c",
                                  f"import pathlib, time; pathlib.Path({str(ready_file(tmp_path, r))!r}).touch(); time.sleep(0.5)"])
                for r in (1, 2)]
    await_replicas(children, tmp_path, poll_s=0.05, timeout_s=20)
    assert all(child.wait() == 0 for child in children)
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(TimeoutError, match="did not start"):
            await_replicas([slow], tmp_path / "none", poll_s=0.05, timeout_s=0.3)
    finally:
        slow.kill()
        slow.wait()
