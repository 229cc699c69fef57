"""anompi's paper profile end to end (runtime: DVC + Prefect + MLflow) on a tiny random
Qwen2-VL from its config class and a tiny UCF-Crime folder of generated mp4 videos (decoded by
PyAV); steps shrunk by --set."""
import math

import pytest

from components.common.io import read_table
from tests.anompi.paper_fixtures import FRAME, write_tiny_qwen2_vl, write_ucf_crime
from tests.paper.harness import run_paper_shape

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]

SHRINK = [
    "seeds=[0]", "paper.device=cpu", "paper.n_frames=16", f"paper.frame_size={FRAME}", "paper.val_share=0.34",
    "paper.sft_videos=3", "paper.sft_steps=2", "paper.thought_tokens=2", "paper.dpo_batch=2",
    "paper.lora_rank=2", "policy.n_anchors=4", "policy.max_steps=2", "policy.budget=12",
    "rollout.n_videos=3", "rollout.per_video=3", "idpo.rounds=1", "idpo.epochs=1",
    "idpo.variants=[full,no_cost]", "idpo.margin=0.0", "idpo.cost_groups=[correct,wrong]",
    "evaluate.passive_frames=[4,8]",
]


def test_anompi_paper_profile_on_tiny_qwen2_vl_and_ucf_crime_layout(tmp_path, tiny_checkpoints):
    model = write_tiny_qwen2_vl(tmp_path / "qwen2-vl", tiny_checkpoints.tokenizer())
    data = write_ucf_crime(tmp_path / "UCF_Crimes")
    sets = SHRINK + [f"paper.model_path={model}", f"paper.dataset_root={data}"]
    result = run_paper_shape("anompi", tmp_path / "project", sets)

    env = result.metrics("anompi", "build_env")
    assert (env["n_train"], env["n_val"], env["n_test"]) == (4, 2, 3)
    assert result.metrics("anompi", "pretrain_perception")["n_decoded_test"] == 3
    listed = read_table(result.out("anompi", "build_env") / "train.parquet").column("path").to_pylist()
    assert listed and all(p.endswith(".mp4") for p in listed)            # decoded from mp4 files
    sft = result.metrics("anompi", "sft_policy", "0")
    assert math.isfinite(sft["final_loss"]) and sft["n_script_chats"] == 3
    assert result.metrics("anompi", "rollout", "0")["n_trajectories"] == 9
    idpo = result.metrics("anompi", "train_idpo", "full-0")
    assert idpo["round1/n_pairs"] > 0
    assert idpo["round1/first_loss"] == pytest.approx(math.log(2), abs=1e-5)   # pi == pi_ref
    assert idpo["round1/first_reward_accuracy"] == 0.0                        # margins all 0 there
    traj = read_table(result.out("anompi", "rollout", "0") / "trajectories.parquet").to_pydict()
    assert all(len(tf) == len([a for a in acts if a >= 0]) for tf, acts in zip(traj["turn_frames"], traj["actions"]))

    evaluate = result.metrics("anompi", "evaluate", "0")
    for name in ("sft", "idpo_full", "idpo_no_cost", "passive_uniform_eq"):
        assert 0.0 <= evaluate[f"acc_{name}"] <= 1.0
        assert 0.0 <= evaluate[f"anomaly_auc_{name}"] <= 1.0
        assert 4 <= evaluate[f"frames_{name}"] <= 12
    results = read_table(result.out("anompi", "evaluate", "0") / "results.parquet").to_pandas()
    assert {"sft", "idpo_full", "idpo_no_cost", "passive_uniform"} <= set(results.policy)
    report = result.metrics("anompi", "report")
    assert {"a_gain_vs_passive", "b_gain_vs_sft", "c_step_ratio"} <= set(report)
