"""Stage functions chained with LocalContext (tests/ioadam/chain.py) on a tiny config; profiles."""
import pytest
import torch

from components.common.io import read_json, read_table
from components.ioadam.config import IOAdamConfig
from components.ioadam.tasks import split_of
from tests.ioadam.chain import run_chain

TINY = {
    "seeds": [0],
    "digits": {"sizes": [64, 16, 10], "epochs": 1, "optimizers": ["adam", "ioadam_b2", "sgd"],
               "lr_grid": [1e-2]},
    "charlm": {"max_bytes": 8_000, "d_model": 16, "n_heads": 2, "n_layers": 1, "seq_len": 16,
               "batch_size": 4, "steps": 3, "sweep_steps": 2, "warmup": 1, "eval_windows": 8,
               "lr_grid": [1e-2]},
    "memory": {"optimizers": ["adam", "ioadam_b2", "ioadam_b2_ref"], "timed_steps": 1},
}


def test_stages_chain_end_to_end(tmp_path):
    summaries = run_chain(tmp_path, "smoke", TINY)
    assert summaries["prepare_digits"]["n_test"] > 300 and summaries["prepare_corpus"]["bytes_val"] > 0

    mem_rows = read_table(tmp_path / "memory_profile" / "memory.parquet").to_pylist()
    fused = next(r for r in mem_rows if r["task"] == "charlm" and r["optimizer"] == "ioadam_b2")
    ref = next(r for r in mem_rows if r["task"] == "charlm" and r["optimizer"] == "ioadam_b2_ref")
    assert fused["grad_bytes"] < ref["grad_bytes"]          # fused keeps no weight gradients
    assert all(r["state_bytes_matrix"] == r["formula_state_bytes_matrix"] for r in mem_rows)
    assert all(r["transient_peak_bytes"] > 0 for r in mem_rows)
    results = read_table(tmp_path / "evaluate" / "results.parquet").to_pylist()
    assert len(results) == 3 + 3                            # 3 digits optimizers x 1 seed, 3 LM optimizers
    assert all(0 <= r["test"] <= 1 for r in results if r["task"] == "digits")
    rep = read_json(tmp_path / "compare" / "report.json")
    assert {"C1/digits/ioadam_b2", "D/ioadam_b2", "P1", "P2", "C2/ioadam_b4", "C3/ioadam_b4"} <= set(rep["checks"])
    assert rep["checks"]["P2"]["pass"] is False             # a one-lr grid is never interior
    assert "all_pass" in summaries["compare"] and (tmp_path / "compare" / "quality_vs_memory.png").exists()


def test_profiles_validate_and_paper_needs_a_corpus(tmp_path):
    for profile in ("smoke", "small"):
        IOAdamConfig.for_profile(profile).preflight()
    with pytest.raises(FileNotFoundError, match="charlm.corpus_path"):
        IOAdamConfig.for_profile("paper").preflight()
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello " * 100)
    IOAdamConfig.for_profile("small", {"charlm": {"source": "text", "corpus_path": str(corpus)}}).preflight()
    with pytest.raises(ValueError, match="charlm.source"):      # a path alone no longer means "text"
        IOAdamConfig.for_profile("small", {"charlm": {"corpus_path": str(corpus)}}).preflight()


def test_paper_preflight_names_the_key_and_the_layout_in_one_line(tmp_path, tiny_checkpoints):
    from components.common.preflight import PreflightError
    from tests.paper.layouts import write_c4

    def preflight(**charlm):
        IOAdamConfig.for_profile("paper", {"charlm": charlm}).preflight()

    empty = tmp_path / "empty"
    empty.mkdir()
    c4 = write_c4(tmp_path / "c4", n_train=4, n_validation=2, shards=1)
    cases = [({}, "charlm.corpus_path", "is not set"),
             ({"corpus_path": str(tmp_path / "nope")}, "charlm.corpus_path", "is not a folder"),
             ({"corpus_path": str(empty)}, "charlm.corpus_path", "c4-train"),
             ({"corpus_path": str(c4)}, "charlm.tokenizer_path", "is not set"),
             ({"corpus_path": str(c4), "tokenizer_path": str(empty)}, "charlm.tokenizer_path", "tokenizer.json")]
    for charlm, key, problem in cases:
        with pytest.raises(PreflightError) as err:
            preflight(**charlm)
        message = str(err.value)
        assert err.value.key == key and problem in message and "\n" not in message
        assert "JSON-lines" in message or "tokenizer" in message          # the expected layout is named
    preflight(corpus_path=str(c4), tokenizer_path=str(tiny_checkpoints.tokenizer()))


def test_module_split_is_stable_and_disjoint():
    names = [f"pkg.mod{i}" for i in range(2000)]
    splits = [split_of(n, 0.1, 0.1) for n in names]
    assert splits == [split_of(n, 0.1, 0.1) for n in names]
    assert 0.07 < splits.count("val") / len(names) < 0.13
    assert 0.07 < splits.count("test") / len(names) < 0.13


def test_c4_corpus_takes_train_shards_and_alternates_validation_docs(tmp_path, tiny_checkpoints):
    from components.common.hf_models import load_tokenizer
    from components.common.readers import read_jsonl
    from components.ioadam.data import c4_corpus
    from tests.paper.layouts import write_c4

    root = write_c4(tmp_path / "c4", n_train=40, n_validation=20, shards=2)
    tok_dir = tiny_checkpoints.tokenizer()
    cfg = IOAdamConfig.for_profile("paper", {"charlm": {"corpus_path": str(root), "tokenizer_path": str(tok_dir),
                                                        "max_train_tokens": 300, "max_eval_tokens": 100}})
    corpus, metrics = c4_corpus(cfg.charlm)
    tok = load_tokenizer(tok_dir)

    def ids(doc):
        return tok(doc["text"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    train = read_jsonl(f"{root}/en/c4-train.00000-of-00002.json.gz")
    val = read_jsonl(f"{root}/en/c4-validation.*.json.gz")
    assert len(corpus["train"]) == 300 and len(corpus["val"]) == len(corpus["test"]) == 100
    assert corpus["train"][:len(ids(train[0]))].tolist() == ids(train[0])       # file order, EOS-ended
    assert corpus["val"][:len(ids(val[0]))].tolist() == ids(val[0])             # docs 0, 2, 4, ...
    assert corpus["test"][:len(ids(val[1]))].tolist() == ids(val[1])            # docs 1, 3, 5, ...
    assert metrics["vocab_size"] == len(tok) and corpus["train"].dtype == torch.int32


def test_llama_size_presets_fill_only_the_dims_not_set():
    paper = IOAdamConfig.for_profile("paper")
    assert (paper.charlm.size, paper.charlm.d_model, paper.charlm.n_layers, paper.charlm.d_ff) == ("60m", 512, 8, 1376)
    big = IOAdamConfig.for_profile("paper", {"charlm": {"size": "1b"}}).charlm
    assert (big.d_model, big.n_layers, big.n_heads, big.d_ff) == (2048, 24, 32, 5461)
    tiny = IOAdamConfig.for_profile("paper", {"charlm": {"d_model": 32, "n_heads": 4}}).charlm
    assert (tiny.d_model, tiny.n_heads, tiny.n_layers) == (32, 4, 8)      # explicit keys win
    with pytest.raises(ValueError, match="charlm.size"):
        IOAdamConfig.for_profile("paper", {"charlm": {"size": "7b"}})
