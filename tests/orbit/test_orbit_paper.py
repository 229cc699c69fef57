"""orbit's paper path in the fast set: free-text rubric items graded through a judge (and the
small profile's predicates still by rule), the HealthBench JSONL reader's validation, the
paper preflight (one line naming the key), and the text-style policy on a tiny Qwen3."""
import json

import numpy as np
import pytest

from components.common.preflight import PreflightError
from components.common.readers import DatasetError
from components.orbit.config import OrbitConfig
from components.orbit.data import healthbench_records, read_healthbench_jsonl
from components.orbit.grpo import Case, ItemJudge, RewardSettings, RubricReward
from tests.orbit.paper_files import fake_judge_server, healthbench_row, write_healthbench
from tests.paper.layouts import write_jsonl


class KeywordGrader:
    """A judge stand-in: met when the criterion's last word is in the completion."""

    name = "fake"

    def __init__(self):
        self.seen = []

    def grade(self, prompt, completion, item):
        self.seen.append((prompt[-1]["content"], completion, item["criterion"]))
        return {"explanation": "", "criteria_met": item["criterion"].split()[-1].strip(".") in completion}


FREE = [{"criterion": "Mentions rest.", "points": 4, "tags": ["level:example", "axis:accuracy"], "predicate": ""},
        {"criterion": "Recommends antibiotics.", "points": -5, "tags": ["level:example", "axis:accuracy"]}]
RULE = {"criterion": "Shows empathy.", "points": 3, "tags": ["level:example", "axis:communication_quality"],
        "predicate": json.dumps({"any": ["empathy"]})}


def test_free_text_items_go_to_the_judge_and_predicates_stay_rule_checked():
    grader = KeywordGrader()
    case = Case([{"role": "user", "content": "flu?"}], FREE + [RULE], [0, 1, 2])
    assert case.free_text == [0, 1]
    met = ItemJudge(grader, workers=3).met(case, [(["empathy"], "rest and fluids"), ([], "take antibiotics")])
    assert met.tolist() == [[True, False, True], [False, True, False]]
    assert len(grader.seen) == 4 and all(c != "Shows empathy." for *_, c in grader.seen)   # rule item not sent
    with pytest.raises(ValueError, match="judge.endpoint"):
        ItemJudge().met(case, [([], "rest")])
    with pytest.raises(ValueError, match="free-text"):
        case.judge([])


def test_rubric_reward_grades_free_text_completions_through_the_judge():
    cases = [Case([{"role": "user", "content": "flu?"}], FREE, [0, 1])]
    reward = RubricReward(cases, RewardSettings(max_response=8, overlong_buffer=0), 0, lambda t: [],
                          ItemJudge(KeywordGrader()))
    completions = [[{"role": "assistant", "content": "rest"}], [{"role": "assistant", "content": "antibiotics"}]]
    r = reward(prompts=[None, None], completions=completions, case_index=[0, 0])
    assert r == pytest.approx([1.0, -5 / 4])
    assert reward.judge.calls == 4


def test_healthbench_reader_keeps_free_text_items_and_names_file_and_field(tmp_path):
    path = write_jsonl(tmp_path / "hard.jsonl", [healthbench_row(0), healthbench_row(1)])
    rows = read_healthbench_jsonl(str(path), "test")
    items = json.loads(rows[0]["rubrics"])
    assert rows[0]["prompt_id"] == "hb-0000" and items[0]["predicate"] == "" and items[0]["tags"][0] == "level:example"
    train = read_healthbench_jsonl(str(write_jsonl(tmp_path / "t.jsonl", [healthbench_row(0, False)])), "train")
    assert train[0]["rubrics"] == "[]"
    bad = healthbench_row(0)
    bad["rubrics"][1]["points"] = "five"
    with pytest.raises(DatasetError, match=r"bad.jsonl: row 2: rubrics\[1\]: field 'points'"):
        healthbench_records(str(write_jsonl(tmp_path / "bad.jsonl", [healthbench_row(1), bad])))
    with pytest.raises(DatasetError, match="missing field 'prompt'"):
        healthbench_records(str(write_jsonl(tmp_path / "np.jsonl", [{"rubrics": []}])))
    with pytest.raises(DatasetError, match=r"prompt\[0\]"):
        healthbench_records(str(write_jsonl(tmp_path / "pm.jsonl", [{"prompt": ["hi"], "rubrics": []}])))


def _paper(tmp_path, policy, rubrics=None, **paper):
    files = write_healthbench(tmp_path / "hb")
    ep = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    values = {"train_jsonl": str(files["train"]), "seed_jsonl": str(files["seed"]),
              "eval_jsonl": str(files["eval"]), "policy_path": str(policy), **paper}
    rubrics = {"endpoint": ep, "embedder": str(policy), **(rubrics or {})}
    return OrbitConfig.for_profile("paper", {"paper": values, "rubrics": rubrics,
                                             "judge": {"endpoint": ep}, "evaluate": {"endpoint": ep}})


def test_paper_preflight_names_the_key_in_one_line(tmp_path, tiny_checkpoints):
    policy = tiny_checkpoints.checkpoint("qwen3")
    _paper(tmp_path, policy).preflight()                       # complete: passes
    with pytest.raises(PreflightError, match=r"^paper.policy_path = .* is not a checkpoint .*config.json"):
        _paper(tmp_path, policy, policy_path=str(tmp_path)).preflight()
    with pytest.raises(PreflightError, match=r"^paper.eval_jsonl = '' is not set"):
        _paper(tmp_path, policy, eval_jsonl="").preflight()
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": [{"role": "user", "content": "x"}]}])
    with pytest.raises(PreflightError, match=r"^paper.seed_jsonl = .* is malformed .*missing field 'rubrics'"):
        _paper(tmp_path, policy, seed_jsonl=str(bad)).preflight()
    _paper(tmp_path, policy, train_jsonl=str(bad)).preflight()     # training prompts need no rubric
    cfg = OrbitConfig.for_profile("paper", {"paper": {"policy_path": str(policy), "train_jsonl": str(bad),
                                                      "seed_jsonl": str(bad), "eval_jsonl": str(bad)}})
    with pytest.raises(PreflightError, match="paper.seed_jsonl"):
        cfg.preflight()
    msg = ""
    try:
        _paper(tmp_path, policy).model_copy(update={"judge": OrbitConfig().judge}).preflight()
    except ValueError as err:
        msg = str(err)
    assert msg.startswith("orbit: judge.endpoint.base_url is not set") and "\n" not in msg
    with pytest.raises(ValueError, match="rubrics.generator = template"):
        _paper(tmp_path, policy).model_copy(update={"rubrics": OrbitConfig().rubrics}).preflight()
    # the retrieval embedder (Qwen3-Embedding) is required in the paper profile, a reranker optional
    with pytest.raises(PreflightError, match=r"^rubrics.embedder = '' is not set; set rubrics.embedder to .*Qwen3-Emb"):
        _paper(tmp_path, policy, rubrics={"embedder": ""}).preflight()
    _paper(tmp_path, policy, rubrics={"reranker": str(policy)}).preflight()
    with pytest.raises(PreflightError, match=r"^rubrics.reranker = .* is not a checkpoint"):
        _paper(tmp_path, policy, rubrics={"reranker": str(tmp_path)}).preflight()


def test_paper_profile_micro_batches_checkpoints_and_keeps_fp32_master_weights():
    g = OrbitConfig.for_profile("paper").grpo
    assert (g.micro_batch, g.generation_batch, g.gradient_checkpointing, g.train_dtype) == (2, 16, True, "float32")
    from components.common.lm_rl import grpo_batches

    assert grpo_batches(g.prompts_per_step, g.group_size, g.micro_batch, g.generation_batch) == {
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 256, "generation_batch_size": 16}
    small = OrbitConfig().grpo        # the small profile keeps one micro-batch per step, no checkpointing
    assert (small.micro_batch, small.generation_batch, small.gradient_checkpointing) == (0, 0, False)


def test_candidate_criteria_rank_the_retrieved_cases_items_then_rerank():
    from components.orbit.rubrics import candidate_criteria

    def item(c, p=3):
        return {"criterion": c, "points": p, "tags": ["level:example", "axis:accuracy"]}

    vecs = {"a": [1.0, 0.0], "b": [0.8, 0.6], "c": [0.0, 1.0], "d": [0.6, 0.8]}
    embed = lambda texts: np.asarray([vecs[t] for t in texts])          # noqa: E731
    rubrics = [[item("c"), item("a")], [item("a", 5), item("b")], [item("d")]]
    q = np.asarray([1.0, 0.0])
    got = candidate_criteria(q, rubrics, embed, k_rerank=3, n=2)
    assert [it["criterion"] for it in got] == ["a", "b"] and got[0]["points"] == 3    # first copy of "a" kept
    rerank = lambda crit: [{"a": 0.1, "b": 0.2, "d": 0.9}[c] for c in crit]     # noqa: E731
    got = candidate_criteria(q, rubrics, embed, k_rerank=3, n=2, rerank=rerank)
    assert [it["criterion"] for it in got] == ["d", "b"]            # "c" was cut before reranking
    assert candidate_criteria(q, [[], []], embed, 3, 2) == []


def test_paper_profile_declares_gpus_for_the_policy_stages():
    from flows.orbit import METHOD

    gpus = {s.name: s.resources.gpus("paper") for s in METHOD.stages}
    assert gpus["train_base"] == gpus["difficulty_filter"] == gpus["grpo_train"] == gpus["evaluate"] == 1
    assert gpus["generate_rubrics"] == 1                   # the Qwen3-Embedding retrieval
    assert all(s.resources.gpus("small") == 0 for s in METHOD.stages)


def test_text_policy_reads_the_whole_conversation_and_is_referenced_not_copied(tmp_path, tiny_checkpoints):
    import torch

    from components.orbit.lm_policy import load_lm_policy, rollouts, write_policy_ref

    folder = tmp_path / "policy"
    write_policy_ref(folder, 6, "text", "cpu", source=str(tiny_checkpoints.checkpoint("qwen3")))
    policy = load_lm_policy(folder)
    assert not (folder / "model.safetensors").exists() and policy.style == "text"
    prompt = healthbench_row(0)["prompt"]
    assert policy.messages(prompt) == prompt and policy.parse("anything at all") == []
    a = rollouts(policy, [prompt], 2, 1.0, seed=5)
    b = rollouts(policy, [prompt], 2, 1.0, seed=5)
    assert a == b and len(a[0]) == 2 and all(st == [] and isinstance(t, str) for st, t in a[0])
    policy.save(tmp_path / "trained")
    again = load_lm_policy(tmp_path / "trained")
    assert again.style == "text" and torch.equal(next(again.model.parameters()), next(policy.model.parameters()))


def test_fake_judge_server_answers_generation_and_grading_prompts():
    from components.orbit.healthbench import OpenAIJudge
    from components.orbit.rubrics import OpenAIGenerator, validate_rubric

    server = fake_judge_server()
    try:
        row = healthbench_row(0)
        items = OpenAIGenerator(server.url, "m").generate(row["prompt"], [row["rubrics"]], [1.0])
        kept, rejected = validate_rubric(items)
        assert len(kept) == 4 and [r["reason"] for r in rejected] == ["zero points"]
        verdict = OpenAIJudge(server.url, "m").grade(row["prompt"], "rest", kept[0])
        assert isinstance(verdict["criteria_met"], bool)
        assert np.all([OpenAIJudge(server.url, "m").grade(row["prompt"], "rest", kept[0]) == verdict])
    finally:
        server.close()
