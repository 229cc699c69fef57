"""orbit's paper profile end to end (runtime: DVC + Prefect + MLflow) on CPU: a tiny random
Qwen3ForCausalLM saved with save_pretrained as the policy, tiny HealthBench JSONL files in the
simple-evals layout, and a fake OpenAI-compatible server as rubric generator and judge; GRPO
steps shrunk by --set. It checks that free-text rubric items are graded through the judge in
every stage and that the HealthBench metrics come out per policy. Retrieval runs the tiny Qwen3
as the embedder and a tiny yes/no reranker; GRPO runs in micro-batches with activation
checkpointing, as the paper profile does."""
import json

import pytest

from tests.orbit.paper_files import CRITERIA, fake_judge_server, tiny_reranker, write_healthbench
from tests.paper.harness import run_paper_shape

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]   # tens of seconds: CI is at its time limit


@pytest.fixture
def judge_server():
    server = fake_judge_server()
    yield server
    server.close()


def paper_sets(files: dict, policy, url: str, reranker) -> list[str]:
    endpoints = [f"{key}.endpoint.{field}={value}" for key in ("rubrics", "judge", "evaluate")
                 for field, value in (("base_url", url), ("model", "fake-judge"), ("concurrency", 4))]
    # the tiny Qwen3 doubles as the retrieval embedder (loaded as the bare Qwen3Model, last-token pooled)
    return [f"paper.train_jsonl={files['train']}", f"paper.seed_jsonl={files['seed']}",
            f"paper.eval_jsonl={files['eval']}", f"paper.policy_path={policy}", "paper.device=cpu",
            f"rubrics.embedder={policy}", f"rubrics.reranker={reranker}", "rubrics.device=cpu",
            "rubrics.k_cases=3", "rubrics.k_rerank=6", "rubrics.n_candidates=4",
            "grpo.micro_batch=2", "grpo.generation_batch=4", "grpo.gradient_checkpointing=true",
            *endpoints, "policy.max_response=8", "filter.rollouts=4", "filter.easy_threshold=1.01",
            "grpo.steps=2", "grpo.prompts_per_step=2", "grpo.group_size=2", "grpo.overlong_buffer=4",
            "evaluate.n_bootstrap=20", "agreement.max_train_examples=12"]


def test_orbit_paper_profile_on_healthbench_jsonl_tiny_qwen3_and_a_fake_judge(tmp_path, tiny_checkpoints,
                                                                             judge_server):
    files = write_healthbench(tmp_path / "healthbench")
    policy = tiny_checkpoints.checkpoint("qwen3")
    reranker = tiny_reranker(tmp_path / "reranker")
    result = run_paper_shape("orbit", tmp_path / "project", paper_sets(files, policy, judge_server.url, reranker))

    cases = result.metrics("orbit", "build_cases")
    assert (cases["n_train"], cases["n_test"], cases["n_val"]) == (6, 6, 0)
    assert cases["n_seed_pool"] == 5                       # the Hard prompt in the pool is dropped
    rubrics = result.metrics("orbit", "generate_rubrics")
    assert rubrics["generator"] == "openai" and rubrics["items_mean"] == 4 and rubrics["cases_without_rubric"] == 0
    assert rubrics["rejection_reasons"] == {"zero points": 6}
    assert rubrics["embedder"] == "hf:last" and rubrics["reranked"] and rubrics["candidates_mean"] == 4
    gen_prompts = judge_server.prompts("You write grading rubrics")
    assert len(gen_prompts) == 6 and all("# Candidate criteria from similar cases" in p for p in gen_prompts)
    assert all(sum(f"] {c}" in p for c, _ in CRITERIA) >= 1 for p in gen_prompts)   # pool items offered
    base = result.metrics("orbit", "train_base")
    assert base["architecture"] == "Qwen3ForCausalLM" and base["device"] == "cpu"
    filt = result.metrics("orbit", "difficulty_filter")
    assert filt["judge_calls"] == 6 * 4 * 4 and filt["n_kept"] > 0    # cases x rollouts x free-text items

    generic = json.loads((result.out("orbit", "generate_rubrics") / "generic_rubric.json").read_text())
    assert all(it["predicate"] == "" for it in generic)    # the baseline rubric is free text too
    for variant in ("orbit_review", "orbit_admission", "orbit_all", "generic"):
        train = result.metrics("orbit", "grpo_train", f"{variant}-3")
        assert train["judge_calls"] > 0 and train["n_cases"] == filt["n_kept"], variant
        assert (result.out("orbit", "grpo_train", f"{variant}-3") / "policy" / "model.safetensors").exists()

    prompts = judge_server.prompts("Look at the conversation below")
    assert prompts and all("# Rubric item\n[" in p for p in prompts)      # items as "[points] criterion"
    assert all(r["model"] == "fake-judge" for r in judge_server.requests)
    results = json.loads((result.out("orbit", "evaluate") / "results.json").read_text())
    assert set(results) == {"base", "orbit_review-3", "orbit_admission-3", "orbit_all-3", "generic-3"}
    for r in results.values():
        assert 0.0 <= r["overall"]["score"] <= 1.0 and r["overall"]["n"] == 6
        assert {"axis:accuracy", "theme:context_seeking"} <= set(r["tags"])
    report = result.metrics("orbit", "report")
    assert {"score_base", "score_orbit", "gain_vs_base", "gain_vs_generic", "axis_accuracy_base"} <= set(report)
    assert "score_base_val" not in report                  # no validation split in the paper profile
    assert -1.0 <= result.metrics("orbit", "judge_agreement")["kappa_heldout"] <= 1.0
