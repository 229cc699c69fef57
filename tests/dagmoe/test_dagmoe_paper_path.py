"""The paper path's pieces without the runtime: streaming shard readers in the published
layouts, the token budget, the preflight's one-line messages and the paper's model size."""
import numpy as np
import pytest

from components.common.readers import DatasetError
from components.dagmoe.config import DagmoeConfig
from components.dagmoe.corpus import (TokenWriter, build_shard_corpus, jsonl_texts, load_tokens,
                                      parquet_texts, shard_files, stream_tokens)
from tests.dagmoe.shards import write_parquet_shards, write_zst_jsonl


def test_zst_jsonl_and_parquet_are_read_document_by_document(tmp_path):
    path = write_zst_jsonl(tmp_path / "val.jsonl.zst", [{"text": f"doc {i}", "meta": {}} for i in range(50)])
    assert list(jsonl_texts(str(path)))[:2] == ["doc 0", "doc 1"]
    write_parquet_shards(tmp_path / "wiki", ["a.parquet"], [{"id": str(i), "text": f"t{i}"} for i in range(40)])
    texts = parquet_texts(str(tmp_path / "wiki" / "a.parquet"), batch_rows=8)
    assert next(texts) == "t0" and len(list(texts)) == 39   # a generator: nothing read ahead
    bad = write_zst_jsonl(tmp_path / "bad.jsonl.zst", [{"content": "x"}])
    with pytest.raises(DatasetError, match=r"bad.jsonl.zst:1: missing string field 'text'"):
        list(jsonl_texts(str(bad)))
    write_parquet_shards(tmp_path / "nope", ["b.parquet"], [{"body": "x"}])
    with pytest.raises(DatasetError, match="missing column 'text'"):
        list(parquet_texts(str(tmp_path / "nope" / "b.parquet")))


def test_token_budget_is_exact_and_every_document_ends_with_eos(tmp_path, tiny_checkpoints):
    from components.common.hf_models import load_tokenizer

    tok = load_tokenizer(tiny_checkpoints.tokenizer())
    writer = TokenWriter(tmp_path / "x.bin")
    docs = stream_tokens(tok, (f"the cat sees the ball {i}" for i in range(1000)), 100, writer, 4)
    writer.close()
    ids = load_tokens(tmp_path, "x")
    assert len(ids) == 100 and docs < 1000                   # stopped early, at the budget
    first = tok("the cat sees the ball 0", add_special_tokens=False)["input_ids"]
    assert ids[:len(first) + 1].tolist() == first + [tok.eos_token_id]


def test_shard_corpus_reads_the_published_layouts(tmp_path, tiny_checkpoints, paper_roots):
    paper = DagmoeConfig.for_profile("paper", {"paper": {
        **{k: str(v) for k, v in paper_roots.items()}, "tokenizer_path": str(tiny_checkpoints.tokenizer()),
        "max_train_tokens": 500, "max_eval_tokens": 50, "read_batch": 8}}).paper
    stats = build_shard_corpus(paper, tmp_path / "out", lambda *a: None)
    assert stats["train_tokens"] == 500 and stats["c4_tokens"] == 50 and stats["wikipedia_files"] == 2
    # Wikipedia / FineWeb-Edu have no validation split: their eval set is read from the last file
    assert shard_files(paper.wikipedia_root, "**/*.parquet", reverse=True)[0].endswith("00001-of-00002.parquet")
    assert np.asarray(load_tokens(tmp_path / "out", "pile")).max() < stats["vocab_size"]


def test_paper_preflight_names_the_key_and_layout_in_one_line(tmp_path, tiny_checkpoints, paper_roots):
    from flows.runtime.registry import get
    from flows.runtime.runner import validate_config

    with pytest.raises(SystemExit, match=r"^\[repro\] dagmoe: paper.pile_root = '' is not set; set "
                                         r"paper.pile_root to The Pile's folder"):
        validate_config(get("dagmoe"), "paper", {})
    roots = {k: str(v) for k, v in paper_roots.items()}
    (paper_roots["pile_root"] / "val.jsonl.zst").unlink()
    with pytest.raises(SystemExit, match="paper.pile_root = .* has no file matching 'val.jsonl.zst'"):
        validate_config(get("dagmoe"), "paper", {"paper": roots})
    write_zst_jsonl(paper_roots["pile_root"] / "val.jsonl.zst", [{"text": "x"}])
    with pytest.raises(SystemExit, match="paper.fineweb_edu_root = .* has no file matching"):
        validate_config(get("dagmoe"), "paper", {"paper": {**roots, "fineweb_edu_root": str(tmp_path / "c4")}})
    with pytest.raises(SystemExit, match="paper.tokenizer_path = '' is not set"):
        validate_config(get("dagmoe"), "paper", {"paper": roots})
    validate_config(get("dagmoe"), "paper",
                    {"paper": {**roots, "tokenizer_path": str(tiny_checkpoints.tokenizer())}})


def test_paper_model_is_the_large_tier_size_and_parameter_matched():
    from components.dagmoe.model import parameter_report
    from components.dagmoe.moe import matched_shared_width

    m = DagmoeConfig.for_profile("paper").model
    counts = parameter_report(m, 50_277)                     # GPT-NeoX-20B's tokenizer (The Pile)
    assert counts["dag_moe"] == pytest.approx(699e6, rel=0.01)
    assert abs(counts["dag_moe"] - counts["moe_shared"]) / counts["moe_shared"] < 0.001
    assert (m.d_graph, m.dag_rounds) == (256, 2) and matched_shared_width(512, 256, 2) == 771


def test_bf16_autocast_training_runs_every_variant_on_cpu(tmp_path):
    """The paper profile trains under bf16 autocast on GPUs; the same code path on CPU (the
    expert dispatch concatenates bf16 outputs with empty fp32 slices of unused experts)."""
    import math

    import torch

    from components.common.context import LocalContext
    from components.dagmoe.corpus import SMALL_EVAL_SETS, write_tokens
    from components.common.io import write_json_atomic
    from components.dagmoe.train import autocast_for, train_stage

    assert autocast_for(torch.device("cpu"), "auto").__class__.__name__ == "nullcontext"
    rng = np.random.default_rng(0)
    for name in ("train", "val_id", "val_ood"):
        write_tokens(tmp_path / "corpus" / f"{name}.bin", rng.integers(0, 40, 400))
    write_json_atomic(tmp_path / "corpus" / "meta.json", {"vocab_size": 40, "eval_sets": SMALL_EVAL_SETS})
    cfg = DagmoeConfig.for_profile("smoke", {
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "context": 8, "n_experts": 8,
                  "d_expert": 16, "d_graph": 4},
        "train": {"steps": 3, "batch_size": 4, "warmup": 1, "log_every": 1, "curve_every": 3,
                  "curve_tokens": 80, "precision": "bfloat16"}})
    final = {}
    for variant in ("moe", "moe_shared", "dag_moe"):
        ctx = LocalContext(out_dir=tmp_path / variant, inputs={"build_corpus": tmp_path / "corpus"},
                           item={"variant": variant, "seed": 0})
        train_stage(cfg, ctx)
        final[variant] = ctx.summary["train_loss_final"]
        assert math.isfinite(final[variant])
    fp32 = LocalContext(out_dir=tmp_path / "fp32", inputs={"build_corpus": tmp_path / "corpus"},
                        item={"variant": "dag_moe", "seed": 0})
    train_stage(DagmoeConfig.for_profile("smoke", {**cfg.model_dump(include={"model"}),
                                                   "train": {**cfg.train.model_dump(), "precision": "float32"}}), fp32)
    assert fp32.summary["train_loss_final"] != final["dag_moe"]      # autocast was in effect
