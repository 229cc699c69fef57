"""ioadam's paper profile end to end (runtime: DVC + Prefect + MLflow) on a tiny LLaMA built
from LlamaConfig, a tokenizer from a local folder and C4-layout shards; steps shrunk by --set."""
import math

import pytest

from components.common.io import read_json, read_table
from tests.paper.harness import run_paper_shape
from tests.paper.layouts import write_c4

pytestmark = pytest.mark.paper_shape

SHRINK = [
    "seeds=[0]", "device.device=cpu",
    "charlm.d_model=32", "charlm.n_heads=4", "charlm.n_layers=2", "charlm.d_ff=64", "charlm.seq_len=32",
    "charlm.batch_size=4", "charlm.steps=6", "charlm.sweep_steps=2", "charlm.warmup=1", "charlm.eval_windows=8",
    "charlm.max_train_tokens=6000", "charlm.max_eval_tokens=600", "charlm.lr_grid=[0.003]",
    "charlm.optimizers=[adam,ioadam_b4]", "charlm.seeds=[0]",
    "digits.sizes=[64,16,10]", "digits.epochs=1", "digits.optimizers=[adam,ioadam_b4]", "digits.lr_grid=[0.01]",
    "memory.optimizers=[adam,ioadam_b4]", "memory.timed_steps=1",
]


def test_ioadam_paper_profile_on_tiny_llama_and_c4_layout(tmp_path, tiny_checkpoints):
    c4 = write_c4(tmp_path / "c4", n_train=300, n_validation=80)
    tokenizer = tiny_checkpoints.tokenizer()
    sets = SHRINK + [f"charlm.corpus_path={c4}", f"charlm.tokenizer_path={tokenizer}"]
    result = run_paper_shape("ioadam", tmp_path / "project", sets)

    corpus = result.metrics("ioadam", "prepare_corpus")
    assert corpus["tokens_train"] == 6000 and corpus["tokens_val"] > 0 and corpus["tokens_test"] > 0
    run = read_json(result.out("ioadam", "train_charlm", "ioadam_b4-0") / "run.json")
    assert run["model_class"] == "LlamaForCausalLM"
    assert run["state_bytes_matrix"] < read_json(
        result.out("ioadam", "train_charlm", "adam-0") / "run.json")["state_bytes_matrix"]

    evaluate = result.metrics("ioadam", "evaluate")
    for name in ("adam", "ioadam_b4"):
        ppl = evaluate[f"charlm/{name}/seed0/test_ppl"]
        assert math.isfinite(ppl) and 1 < ppl < 2 * corpus["vocab_size"]   # a trained-ish LM, not NaN
    mem = {r["optimizer"]: r for r in read_table(result.out("ioadam", "memory_profile") / "memory.parquet").to_pylist()
           if r["task"] == "charlm"}
    assert mem["ioadam_b4"]["state_bytes_matrix"] == mem["ioadam_b4"]["formula_state_bytes_matrix"]
    assert mem["ioadam_b4"]["total_peak_bytes"] < mem["adam"]["total_peak_bytes"]
    compare = result.metrics("ioadam", "compare")
    assert "all_pass" in compare
    assert compare["charlm/ioadam_b4/test_ppl_mean"] == pytest.approx(evaluate["charlm/ioadam_b4/seed0/test_ppl"])
