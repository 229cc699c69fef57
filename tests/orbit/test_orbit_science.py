"""Unit tests of the orbit science: HealthBench scoring, judges, GRPO pieces, the curriculum,
rubric validation, the Qwen3 policy's statement tokens, data splits and the paper-profile loaders."""
import json

import numpy as np
import pytest
import torch

from components.orbit import healthbench as hb
from components.orbit.grpo import (Case, CurriculumState, RewardSettings, RubricReward, StochasticReviewState,
                                   group_advantages, overlong_penalty, success_matrix)
from components.orbit.ontology import (CONDITIONS, PHRASES, generic_rubric, parse_response, reference_rubric,
                                       render_response)
from components.orbit.rubrics import TemplateGenerator, extract_context, validate_item, validate_rubric

torch.set_num_threads(1)


def _item(points, pred=None, tags=("level:example", "axis:accuracy"), criterion=None):
    return {"criterion": criterion or f"item {points}", "points": points, "tags": list(tags),
            "predicate": json.dumps(pred or {"any": ["empathy"]})}


# ---------------------------------------------------------------- the HealthBench score
def test_example_score_hand_computed():
    assert hb.example_score([10, 5, -10], [True, False, True]) == pytest.approx(0.0)
    assert hb.example_score([10, 5, -10], [True, True, False]) == pytest.approx(1.0)
    assert hb.example_score([5, -10], [False, True]) == pytest.approx(-2.0)      # not clipped
    assert hb.example_score([4, 6], [False, True]) == pytest.approx(0.6)
    assert hb.example_score([-3, -7], [True, True]) is None                    # no positive item


def test_reward_fallback_policies():
    assert hb.reward_score([-3, -7], [True, False], "positive") == 0.0
    assert hb.reward_score([-3, -7], [True, False], "signed_fallback") == pytest.approx(-0.3)
    assert hb.reward_score([10, -5], [False, True]) == pytest.approx(-0.5)


def test_clipping_only_at_the_aggregate_and_bootstrap_matches_reference():
    assert hb.clipped_mean([-0.5, 0.3]) == 0.0
    assert hb.clipped_mean([1.5, 0.9]) == 1.0
    assert hb.clipped_mean([-0.2, 0.8]) == pytest.approx(0.3)
    values = [-0.4, 0.1, 0.5, 0.9, 1.2, 0.0, 0.3]
    stats = hb.clipped_stats(values, n_bootstrap=500, seed=3)
    # numpy reproduction of simple-evals' _compute_clipped_stats with the same resamples
    rng = np.random.default_rng(3)
    boots = [np.clip(np.mean(rng.choice(values, len(values))), 0, 1) for _ in range(500)]
    assert stats["score"] == pytest.approx(np.clip(np.mean(values), 0, 1))
    assert stats["bootstrap_std"] == pytest.approx(np.std(boots))
    assert stats["n"] == 7


def test_tag_scores_skip_tags_without_positive_points():
    items = [_item(6, tags=("level:example", "axis:accuracy")),
             _item(-4, tags=("level:example", "axis:communication_quality")),
             _item(2, tags=("level:example", "axis:accuracy"))]
    s = hb.tag_scores(items, [False, True, True])
    assert s == {"axis:accuracy": pytest.approx(2 / 8)}


def test_aggregate_rates_and_theme_tags():
    ex = [{"score": 0.5, "met": [True, False, True], "points": [4, 4, -2], "tag_scores": {},
           "example_tags": ["theme:a"]},
          {"score": -1.0, "met": [False, True], "points": [2, -2], "tag_scores": {},
           "example_tags": ["theme:b"]}]
    out = hb.aggregate(ex, n_bootstrap=50)
    assert out["overall"]["score"] == 0.0                           # mean -0.25 clipped
    assert out["tags"] == {"theme:a": 0.5, "theme:b": 0.0}
    assert out["positive_hit_rate"] == pytest.approx(1 / 3)
    assert out["negative_rate"] == pytest.approx(1.0)


def test_grader_prompt_renders_points_and_conversation():
    prompt = [{"role": "user", "content": "my son has a fever ."}]
    text = hb.grader_prompt(prompt, "try to relax.", _item(-4, criterion="Pads the answer."))
    assert "[-4] Pads the answer." in text
    assert "user: my son has a fever .\n\nassistant: try to relax." in text
    assert hb.parse_json_reply('```json\n{"explanation": "x", "criteria_met": true}\n```')["criteria_met"] is True


# ---------------------------------------------------------------- judges
def test_rule_judge_interface_and_negative_semantics():
    judge = hb.RuleJudge()
    reply = render_response(["antibiotics_take", "safety_net"])
    out = judge.grade([], reply, _item(-7, {"any": ["antibiotics_take"]}))
    assert set(out) == {"explanation", "criteria_met"} and out["criteria_met"] is True   # penalised
    assert judge.grade([], reply, _item(5, {"any": ["antibiotics_avoid"]}))["criteria_met"] is False
    with pytest.raises(ValueError, match="no predicate"):
        judge.grade([], reply, {"criterion": "x", "points": 3, "tags": [], "predicate": ""})


def test_predicates():
    st = ["empathy", "filler_hope", "filler_relax", "emergency"]
    assert hb.eval_predicate({"count": {"ids": ["filler_hope", "filler_relax"], "min": 2}}, st)
    assert hb.eval_predicate({"any": ["emergency"], "none": ["self_care"]}, st)
    assert not hb.eval_predicate({"any": ["self_care"], "none": ["emergency"]}, st)
    assert hb.eval_predicate({"min_n": 2, "max_n": 4}, st) and not hb.eval_predicate({"max_n": 3}, st)
    assert hb.eval_predicate({"pairs": [["emergency", "no_care_needed"], ["empathy", "filler_hope"]]}, st)


def _viral_red_flag_facts():
    return {"condition": "influenza", "kind": "viral", "age": "adult", "subject": "i",
            "symptoms": ["a high fever", "muscle aches"], "red_flag": "chest pain", "duration": "",
            "pregnant": False, "role": "layperson", "low_resource": False, "clinician_type": "",
            "revealed_turns": 3}


def test_keyword_stuffing_does_not_win():
    """A reply that says every statement trips the contradiction and filler items and scores
    far below a short, case-appropriate reply."""
    items = reference_rubric(_viral_red_flag_facts())
    judge = hb.RuleJudge()

    def score(ids):
        return hb.grade_example(judge, [], render_response(ids), items, [])["score"]

    stuffed = score(list(PHRASES))
    good = score(["emergency", "ask_duration", "antibiotics_avoid", "uncertainty", "advice:influenza"])
    assert stuffed < 0.2 < 0.8 < good


def test_minilm_judge_with_a_fake_encoder():
    def encode(texts):   # 2-d "embeddings": statements about emergencies point the same way
        return np.asarray([[1.0, 0.0] if "emergency" in t else [0.0, 1.0] for t in texts])

    judge = hb.MiniLMJudge(encode, threshold=0.5)
    item = {"criterion": "Advises emergency care.", "points": 10, "tags": []}
    assert judge.grade([], PHRASES["emergency"], item)["criteria_met"] is True
    assert judge.grade([], PHRASES["self_care"], item)["criteria_met"] is False


def test_cohen_kappa_known_values():
    assert hb.cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.5)
    assert hb.cohen_kappa([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert hb.cohen_kappa([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)


# ---------------------------------------------------------------- GRPO
def test_group_advantages_zero_mean_and_constant_groups_dropped():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.3, 0.3, 0.3, 0.3], [2.0, 1.0, 0.0, 1.0]])
    adv, keep = group_advantages(r)
    assert keep.tolist() == [True, False, True]
    assert torch.allclose(adv.mean(1), torch.zeros(3), atol=1e-6)
    assert torch.allclose(adv[0], torch.tensor([1.0, -1.0, -1.0, 1.0]) * (1 / r[0].std()) * 0.5, atol=1e-5)
    assert torch.allclose(adv[2].std(), torch.tensor(1.0), atol=1e-4)   # unbiased std normalised
    assert torch.all(adv[1] == 0)


def test_overlong_penalty():
    assert overlong_penalty(7, 10, 3) == 0.0
    assert overlong_penalty(8, 10, 3) == pytest.approx(-1 / 3)
    assert overlong_penalty(10, 10, 3) == pytest.approx(-1.0)
    assert overlong_penalty(10, 10, 0) == 0.0


# ---------------------------------------------------------------- curriculum
def test_curriculum_cold_start_ema_mastery_and_gate():
    c = CurriculumState(order=[3, 0, 1, 2, 4, 5, 6, 7], window=3, alpha=0.5, mastery=0.9, gate=0.75)
    assert c.active == [3, 0, 1]                           # cold start: a full window, in order
    c.update(np.array([[1.0, 0.0, 1.0]]), [3, 0, 1])
    assert c.ema[3] == pytest.approx(0.5) and c.ema[0] == 0.0   # ema <- (1-a) ema + a s
    assert c.active == [3, 0, 1] and not c.mastered
    c.update(np.ones((3, 3)), [3, 0, 1])                   # three more successes each
    assert c.ema[3] == pytest.approx(0.9375) and c.ema[0] == pytest.approx(0.875)
    assert c.mastered == [3, 1]                            # 0.9375 > 0.9; 0.875 not
    assert c.active == [0, 2]                              # gate passed (0.875 > 0.75): +1 only
    c.ema[0] = 0.9
    c.update(np.zeros((0, 2)), [0, 2])
    assert 0 not in c.mastered                             # strict > 0.9
    assert c.active == [0, 2]                              # mean (0.9 + 0) / 2 <= 0.75: gated
    assert c.reward_items() == [0, 2]


def test_curriculum_reward_falls_back_to_all_items_when_everything_is_mastered():
    c = CurriculumState(order=[1, 0], window=2, alpha=1.0)
    c.update(np.ones((1, 2)), c.active)
    assert c.mastered == [1, 0] and c.reward_items() == [1, 0]


def test_success_signal_flips_for_negative_items():
    met = np.array([[True, True], [False, False]])
    s = success_matrix(met, np.array([5.0, -5.0]))
    assert s.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_stochastic_review_starts_from_filter_rates_reviews_mastered_and_weights_by_ema():
    import random

    c = StochasticReviewState(order=[2, 0, 1, 3, 4], init_ema={0: 0.95, 1: 0.5, 2: 0.0, 3: 0.2, 4: 0.1},
                              window=4, alpha=0.5, mastery=0.9, review_ratio=0.5, min_weight=0.2)
    assert c.ema[0] == 0.95                                # starts at the difficulty-filter success rate
    rng = random.Random(0)
    assert c.window_items(rng) == [2, 0, 1, 3]             # no gate: a full window in order
    assert c.window_items(rng)[:3] == [2, 1, 3] and c.mastered == [0]
    # 0 (mastered) is reviewed: 3 unfinished active + 1 review slot (<= 0.5 * 4)
    assert sorted(c.window_items(rng)) == [0, 1, 2, 3]
    ema0 = c.ema[0]
    r = c.score_rollout(np.array([1.0, 0.0]), [0, 2])
    w0, w2 = 0.2 + 0.8 * (1 - (0.5 * ema0 + 0.5)), 0.2 + 0.8 * 1.0   # EMA updated before weighting
    assert r == pytest.approx(w0 / (w0 + w2))
    assert c.ema[2] == 0.0 and c.ema[0] == pytest.approx(0.5 * ema0 + 0.5)


def test_reward_keeps_curricula_across_calls_and_groups_by_case():
    items = [_item(10, {"any": ["empathy"]}), _item(-5, {"any": ["emergency"]})]
    cases = [Case([], items, [1, 0], [0.95, 0.1]), Case([], items, [0, 1], [0.2, 0.2])]
    parse = lambda text: text.split()                     # noqa: E731
    reward = RubricReward(cases, RewardSettings(curriculum="stochastic_review", review_window=2,
                                                overlong_buffer=0), seed=0, parse=parse)
    comps = ["empathy", "emergency", "empathy", ""]
    out = reward(None, comps, case_index=[0, 1, 0, 1], completion_ids=[[1]] * 4)
    assert len(out) == 4 and len(reward.records) == 1
    # case 1, window [0, 1]: "emergency" fails both items, "" meets the negative one only
    assert out[1] == 0.0 and 0 < out[3] < 1
    ema_after = dict(reward.curricula[0].ema)
    reward(None, comps, case_index=[0, 1, 0, 1], completion_ids=[[1]] * 4)
    assert reward.curricula[0].ema != ema_after           # the state persists across steps
    plain = RubricReward(cases, RewardSettings(overlong_buffer=3, max_response=10), seed=0, parse=parse)
    out = plain(None, ["empathy"] * 2, case_index=[0, 0], completion_ids=[[1] * 7, [1] * 10])
    assert out == pytest.approx([1.0, 0.0])               # HealthBench score + DAPO overlong penalty


# ---------------------------------------------------------------- rubric validation and generation
@pytest.mark.parametrize("bad, reason", [
    ({"criterion": "", "points": 3, "tags": ["level:example", "axis:accuracy"]}, "empty criterion"),
    ({"criterion": "x", "points": 2.5, "tags": ["level:example", "axis:accuracy"]}, "not an integer"),
    ({"criterion": "x", "points": True, "tags": ["level:example", "axis:accuracy"]}, "not an integer"),
    ({"criterion": "x", "points": 11, "tags": ["level:example", "axis:accuracy"]}, "outside"),
    ({"criterion": "x", "points": 0, "tags": ["level:example", "axis:accuracy"]}, "zero points"),
    ({"criterion": "x", "points": 3, "tags": ["level:example"]}, "axis tag"),
    ({"criterion": "x", "points": 3, "tags": ["level:example", "axis:vibes"]}, "axis tag"),
    ({"criterion": "x", "points": 3, "tags": ["axis:accuracy"]}, "level"),
    ({"criterion": "Fails to mention rest.", "points": -3, "tags": ["level:example", "axis:accuracy"]},
     "omission"),
    ({"criterion": "x", "points": 3, "tags": ["level:example", "axis:accuracy"], "predicate": "{"}, "JSON"),
    ({"criterion": "x", "points": 3, "tags": ["level:example", "axis:accuracy"],
      "predicate": json.dumps({"any": ["teleport"]})}, "unknown statements"),
])
def test_invalid_items_are_rejected_with_a_reason(bad, reason):
    assert reason in validate_item(bad)
    kept, rejected = validate_rubric([bad, _item(5)])
    assert len(kept) == 1 and reason in rejected[0]["reason"]


def test_rubric_level_rejections():
    kept, rej = validate_rubric([_item(5, criterion="a"), _item(4, criterion="A ")])
    assert len(kept) == 1 and rej[0]["reason"] == "duplicate criterion"
    items = [_item(p, criterion=f"c{i}") for i, p in enumerate([1, 2, 3] * 8)]
    kept, rej = validate_rubric(items, max_items=20)
    assert len(kept) == 20 and len(rej) == 4 and all("20-item limit" in r["reason"] for r in rej)
    assert all(r["item"]["points"] == 1 for r in rej)              # the lightest items go
    kept, rej = validate_rubric([_item(-3, criterion="a"), _item(-2, criterion="b")])
    assert kept == [] and {r["reason"] for r in rej} == {"rubric has no positive item"}
    assert "predicate" in validate_item({**_item(3), "predicate": ""}, require_predicate=True)


def test_template_generator_reads_the_dialogue_and_transfers_by_vote():
    from components.orbit.ontology import condition_items, dialogue_turns

    facts = _viral_red_flag_facts()
    prompt = dialogue_turns(facts)
    assert extract_context(prompt) == {"red_flag": "chest pain", "duration_given": False, "pregnant": False,
                                       "clinician": False, "low_resource": False}
    flu = condition_items(CONDITIONS[1])
    cold = condition_items(CONDITIONS[0])
    gen = TemplateGenerator(vote_share=0.5)
    items = gen.generate(prompt, [flu, flu, cold], [0.9, 0.8, 0.85])
    crits = {it["criterion"] for it in items}
    assert {it["criterion"] for it in flu} <= crits                  # majority vote: kept
    assert not any("common cold" in c for c in crits)              # minority: dropped
    kept, rejected = validate_rubric(items, require_predicate=True)
    assert rejected == [] and len(kept) <= 20
    assert any("emergency" in json.loads(it["predicate"]).get("any", []) and it["points"] > 0 for it in kept)
    generic, _ = validate_rubric(generic_rubric(), require_predicate=True)
    assert len(generic) == len(generic_rubric())


def test_reference_rubric_is_case_conditioned():
    facts = _viral_red_flag_facts()
    calm = {**facts, "red_flag": "", "duration": "for two days"}
    a, b = reference_rubric(facts), reference_rubric(calm)
    assert validate_rubric(a, require_predicate=True)[1] == [] and len(a) <= 20
    er = {"any": ["emergency"]}
    assert [it["points"] for it in a if json.loads(it["predicate"]) == er] == [10]
    assert [it["points"] for it in b if json.loads(it["predicate"]) == er] == [-5]   # over-referral


# ---------------------------------------------------------------- policy and data
def test_statement_tokens_round_trip_and_other_words_are_ignored():
    from components.orbit.lm_policy import render, statement_token, statements_of

    ids = ["empathy", "advice:migraine", "emergency"]
    text = " ".join(statement_token(p) for p in ids + ["empathy"])
    assert statements_of("fever " + text + " cough") == ids          # in order, each once
    assert parse_response(render(ids)) == ids


def test_tiny_qwen3_policy_saves_loads_and_samples_reproducibly(tmp_path):
    from components.orbit.base import base_policy, sft_batch
    from components.orbit.config import OrbitConfig
    from components.orbit.lm_policy import load_lm_policy, rollouts
    from components.orbit.ontology import build_case_rows

    rows = build_case_rows(6, 0, "train", dict(p_red_flag=0.3, p_missing_duration=0.5, p_pregnant=0.3,
                                               p_clinician=0.2, p_low_resource=0.2, p_truncate_first=0.2))
    prompts = [json.loads(r["prompt"]) for r in rows]
    p = OrbitConfig.for_profile("smoke").policy
    policy = base_policy(p, prompts, prompts)
    assert type(policy.model).__name__ == "Qwen3ForCausalLM"
    ids = policy.prompt_ids(prompts[0])
    assert policy.tokenizer.unk_token_id not in ids                  # the vocabulary covers the dialogue
    x, attn, labels = sft_batch(policy, [ids, ids[:5]], [policy.reply_ids(["empathy"])] * 2)
    assert (labels[0] != -100).sum() == 2 and labels[0, len(ids)] == policy.reply_ids(["empathy"])[0]
    assert attn.sum(1).tolist() == [len(ids) + 2, 7]
    policy.save(tmp_path / "p")
    again = load_lm_policy(tmp_path / "p")
    a = rollouts(policy, prompts, 2, 1.0, seed=3)
    b = rollouts(again, prompts, 2, 1.0, seed=3)
    assert a == b and len(a) == 6 and all(len(r) == 2 for r in a)


def test_responses_round_trip_through_the_parser():
    ids = ["empathy", "advice:migraine", "emergency"]
    assert parse_response(render_response(ids)) == ids
    assert parse_response("something else. " + PHRASES["empathy"]) == ["other", "empathy"]


def test_splits_are_disjoint_and_train_rows_carry_no_rubric(tmp_path):
    from components.common.context import LocalContext
    from components.common.io import read_table
    from components.orbit.config import OrbitConfig
    from components.orbit.data import build_cases_stage
    from components.orbit.ontology import prompt_text
    from flows.runtime.dag import DeclaredParams

    cfg = OrbitConfig.for_profile("smoke")
    ctx = LocalContext(out_dir=tmp_path)
    build_cases_stage(DeclaredParams(cfg, ("cases", "paper"), "build_cases"), ctx)
    rows = read_table(tmp_path / "cases.parquet").to_pylist()
    text = {s: {prompt_text(json.loads(r["prompt"])) for r in rows if r["split"] == s}
            for s in ("train", "test", "seed_pool")}
    assert not text["seed_pool"] & (text["test"] | text["train"])
    assert all(r["rubrics"] == "[]" for r in rows if r["split"] == "train")
    assert all(json.loads(r["rubrics"]) for r in rows if r["split"] == "test")
    assert all(json.loads(r["prompt"])[-1]["role"] == "user" for r in rows)   # truncated at a patient turn


def test_healthbench_jsonl_loader_and_paper_preflight(tmp_path):
    from components.orbit.config import OrbitConfig
    from components.orbit.data import read_healthbench_jsonl

    row = {"prompt": [{"role": "user", "content": "hi"}], "prompt_id": "p1", "example_tags": ["theme:x"],
           "rubrics": [{"criterion": "Greets.", "points": 3, "tags": ["level:example", "axis:accuracy"]}]}
    path = tmp_path / "hb.jsonl"
    path.write_text(json.dumps(row) + "\n")
    out = read_healthbench_jsonl(str(path), "test")
    assert out[0]["prompt_id"] == "p1" and json.loads(out[0]["rubrics"])[0]["points"] == 3
    path.write_text(json.dumps({"prompt": []}) + "\n")
    with pytest.raises(ValueError, match="rubrics"):
        read_healthbench_jsonl(str(path), "test")
    with pytest.raises(FileNotFoundError, match="paper.policy_path"):
        OrbitConfig.for_profile("paper").preflight()
    OrbitConfig.for_profile("small").preflight()
    with pytest.raises(ValueError, match="rule judge"):
        OrbitConfig.for_profile("small", {"rubrics": {"generator": "openai",
                                                       "endpoint": {"base_url": "http://x", "model": "m"}}}).preflight()
