"""artist's paper profile end to end (runtime: DVC + Prefect + MLflow) on CPU: a tiny random
Qwen3ForCausalLM saved with save_pretrained as the policy, and two benchmarks (ETI, RCW) of 8
questions per split in the official layout; LoRA SFT, the hierarchical RL through the shared GRPO
path and the sampled evaluation, with steps shrunk by --set."""
import pytest

from tests.artist.paper_files import write_benchmarks
from tests.paper.harness import run_paper_shape

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]   # about a minute: CI is at its time limit


def test_artist_paper_profile_on_tiny_qwen3_and_benchmarks_in_the_official_layout(tmp_path, tiny_checkpoints):
    root = write_benchmarks(tmp_path / "benchmarks", n=8)
    sets = [f"paper.model_path={tiny_checkpoints.checkpoint('qwen3')}", f"paper.benchmark_root={root}",
            "paper.benchmarks=[ETI, RCW]", "paper.device=cpu", "seeds=[0]", "views.budget=8",
            "views.max_zooms=2", "lm.sft_steps=2", "lm.sft_batch=2", "lm.controller_tokens=12",
            "lm.reasoner_tokens=6", "lm.rl_block=1", "lm.micro_questions=1", "lm.eval_batch=16",
            "rl.iterations=2", "rl.questions=2", "rl.controller_rollouts=2", "rl.reasoner_rollouts=2",
            "evaluate.runs=1"]
    result = run_paper_shape("artist", tmp_path / "project", sets)

    tasks = result.metrics("artist", "generate_tasks")
    assert (tasks["n_train"], tasks["n_val"], tasks["n_test"]) == (16, 16, 16)
    assert tasks["ETI_test"] == tasks["RCW_test"] == 8
    traces = result.metrics("artist", "build_sft_traces")
    assert traces["n_traces"] == 16 and traces["share_with_zooms"] == 0.5      # ETI rows carry a curated trace
    sft = result.metrics("artist", "sft", "0")
    assert sft["architecture"] == "Qwen3ForCausalLM" and sft["steps"] == 2
    assert not any(k.startswith("val_oracle_acc") for k in sft)               # no evidence annotations
    assert (result.out("artist", "sft", "0") / "adapter" / "adapter_config.json").exists()   # LoRA (peft)
    rl = result.metrics("artist", "rl", "0")
    assert rl["iterations"] == 2 and -2.0 <= rl["last_reward"] <= 5.0 and 0 <= rl["last_consistency"] <= 1
    assert (result.out("artist", "rl", "0") / "adapter" / "adapter_model.safetensors").exists()
    assert result.metrics("artist", "train_static", "static-0") == {"skipped_for_lm_policy": 1.0}
    ev = result.metrics("artist", "evaluate", "0")
    for system in ("artist_rl", "artist_sft", "overview_only", "uniform"):
        for key in ("acc_ETI", "acc_RCW", "f1_ETI", "f1_RCW", "acc_avg", "f1_avg", "fraction_read"):
            assert 0.0 <= ev[f"{system}_{key}"] <= 1.0, (system, key)
    assert "oracle_acc_avg" not in ev                                         # no evidence, no oracle arm
    report = result.metrics("artist", "report")
    assert {"C2_rl_over_sft", "artist_rl_acc_avg", "artist_sft_acc_avg", "C4_fraction_read"} <= set(report)
    assert "C1_localize_gain" not in report and "P1_val_oracle_acc_worst" not in report
