"""The language-model policy's text protocol, rewards, benchmark readers and paper preflight
(fast: no model is trained here)."""
import json

import numpy as np
import pytest

from components.artist.lm import (Question, TextSettings, answer_text, build_tokenizer, controller_messages,
                                  fraction_read, parse_answer, parse_plan, plan_text, reasoner_format,
                                  reasoner_messages, split_rounds)

S = TextSettings(budget=16, max_zooms=3, value_scale=2.0, value_clip=12)


def question(n=256, seed=0):
    rng = np.random.default_rng(seed)
    return Question(text="which quarter ?", options=("a", "b", "c", "d"), series=rng.normal(size=n), answer=2)


def test_plan_text_round_trips_through_the_parser_with_a_perfect_format():
    wins = [(0, 16), (64, 80), (128, 192)]
    plan = parse_plan(plan_text(wins), 256, max_zooms=3)
    assert plan.windows == wins and plan.format == 1.0 and not plan.error and plan.rounds == 3
    assert len(split_rounds(plan_text(wins))) == 4                 # three zoom rounds, then ACCEPT
    empty = parse_plan(plan_text([]), 256, 3)                      # ACCEPT at once is well formed
    assert empty.windows == [] and empty.format == 1.0 and not empty.error


def test_plan_format_errors_follow_the_official_rules():
    call = '<think> x </think> <tool_call> {"name": "timeseries_zoom_in_tool", "arguments": {"ts_seg": [%d, %d]}} </tool_call>'
    accept = "<think> y </think> <answer> ACCEPT </answer>"
    assert parse_plan(call % (50, 10) + " " + accept, 256, 3).error            # start >= end: -1
    assert parse_plan(call % (0, 10), 256, 3).error                           # no ACCEPT at the end
    assert parse_plan("nothing at all", 256, 3).error                         # neither call nor answer
    over = parse_plan(call % (200, 300) + " " + accept, 256, 3)               # end > length: -0.5
    assert over.error and over.format == -1.0
    no_think = parse_plan(call.replace("<think> x </think> ", "") % (0, 10) + " " + accept, 256, 3)
    assert not no_think.error and no_think.format == pytest.approx((0.5 + 1.0) / 2)   # missing think: 0.5
    many = parse_plan(" ".join([call % (i, i + 8) for i in range(0, 80, 16)] + [accept]), 256, 3)
    assert many.rounds == 5 and len(many.windows) == 3                        # capped at max_zooms


def test_answers_and_the_reasoner_format():
    assert parse_answer(answer_text(2), 4) == 2
    assert parse_answer("<answer> E </answer>", 4) is None                   # not one of 4 options
    assert parse_answer("no answer", 4) is None
    assert reasoner_format(answer_text(1), 4) == 1.0
    assert reasoner_format("<answer> B </answer>", 4) == 0.5
    assert reasoner_format("<answer> ACCEPT </answer>", 4) == -1.0


def test_the_tiny_tokenizer_round_trips_every_protocol_text():
    q = question()
    texts = [m["content"] for m in controller_messages(q, S) + reasoner_messages(q, [(0, 64)], S)]
    tok = build_tokenizer(texts, q.length, S.value_clip)
    for text in [plan_text([(0, 16), (192, 256)]), answer_text(3), texts[1], texts[3]]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == text


def test_the_reasoner_reads_only_the_overview_and_the_zoomed_windows():
    q = question()
    x = q.series.copy()
    x[160:176] += np.tile([1.5, -1.5], 8)           # zero-mean at the overview's 16-sample bins
    changed = Question(q.text, q.options, x, q.answer)
    assert controller_messages(q, S) == controller_messages(changed, S)
    assert reasoner_messages(q, [(0, 64)], S) == reasoner_messages(changed, [(0, 64)], S)
    assert reasoner_messages(q, [(160, 176)], S) != reasoner_messages(changed, [(160, 176)], S)
    assert "segment [ 0 , 64 ]" in reasoner_messages(q, [(0, 64)], S)[1]["content"]


def test_fraction_read_is_the_union_of_windows():
    assert fraction_read([(0, 64), (32, 96)], 256) == pytest.approx(96 / 256)
    assert fraction_read([], 256) == 0.0


class _Runner:
    """Stands in for the LM: every reasoner sample answers C (the right answer) unless the plan
    zoomed nowhere, then A."""

    def sample(self, messages, n, temperature, max_new_tokens):
        return [[answer_text(2 if "segment [" in m[1]["content"] else 0)] * n for m in messages]


def test_controller_reward_uses_reasoner_consistency_and_punishes_format_errors():
    from components.artist.config import ArtistConfig
    from components.artist.lm_stages import ControllerReward, ReasonerReward, pick_reasoner_windows

    cfg = ArtistConfig()
    qs = [question()]
    reward = ControllerReward(_Runner(), qs, S, cfg.rl, cfg.lm)
    good, none, bad = plan_text([(0, 64)]), plan_text([]), "garbage"
    r = reward(None, [[{"role": "assistant", "content": t}] for t in (good, none, bad)], qid=[0, 0, 0])
    explore = 0.0                                  # one window: outside the 2-4 segment bonus
    assert r[0] == pytest.approx(3.0 * 1.0 - 0.1 * 1 + 1.0 + explore)
    assert r[1] == pytest.approx(3.0 * 0.0 + 1.0)
    assert r[2] == -2.0
    assert len(reward.groups[0]) == 3 and reward.records[0]["format_error"] == pytest.approx(1 / 3)
    picks = pick_reasoner_windows({0: [([(0, 64)], np.array([4.0, 4.0])), ([], np.array([1.0, 4.0]))]},
                                  cfg.rl, np.random.default_rng(0))
    assert len(picks) == 1 and picks[0][0] == 0
    rr = ReasonerReward(qs, cfg.rl)
    assert rr(None, [answer_text(2), answer_text(1), "x"], qid=[0, 0, 0]) == [4.0, 1.0, -1.0]


def test_rl_batch_arguments_fit_the_shared_grpo_path():
    """Regression: after components/common/lm_rl gained micro-batches, passing TRL's
    gradient_accumulation_steps through **grpo_args collided with grpo_train's own
    (GRPOConfig got it twice, the paper profile's rl stage failed). Every batch argument must be
    a named parameter of grpo_train, and the step must be the same rollouts as before."""
    import inspect

    from components.artist.config import ArtistConfig
    from components.artist.lm_stages import grpo_batch_args
    from components.common.lm_rl import grpo_batches, grpo_train

    named = {k for k, p in inspect.signature(grpo_train).parameters.items() if p.kind is p.KEYWORD_ONLY}
    paper = ArtistConfig.for_profile("paper")
    for lm, group in ((paper.lm, paper.rl.controller_rollouts), (paper.lm, paper.rl.reasoner_rollouts),
                      (ArtistConfig().lm, 6)):
        args = grpo_batch_args(lm, paper.rl.questions, group)
        assert set(args) <= named, set(args) - named
        trl = grpo_batches(args["prompts_per_step"], args["group_size"], args["micro_batch"])
        micro = lm.micro_questions or paper.rl.questions
        assert trl == {"per_device_train_batch_size": micro * group,
                       "gradient_accumulation_steps": paper.rl.questions // micro,
                       "generation_batch_size": paper.rl.questions * group}
    odd = ArtistConfig(lm={"micro_questions": 3}).lm           # does not divide 16: the whole step
    assert grpo_batch_args(odd, 16, 4)["micro_batch"] == 64


# ---------------------------------------------------------------- benchmarks (published layout)
def test_benchmark_rows_map_labels_as_the_official_loaders(tmp_path):
    from components.artist.benchmarks import BENCHMARKS, answer_index, cot_windows, read_split
    from tests.artist.paper_files import write_benchmarks

    assert answer_index(BENCHMARKS["TSQA"], {"label": "C", "question_format": "multiple_choice"}, []) == 2
    assert answer_index(BENCHMARKS["TSQA"], {"label": "False", "question_format": "true_false"}, []) == 1
    assert answer_index(BENCHMARKS["TRQA"], {"label": "B", "question_type": "multiple_choices"}, []) == 1
    assert answer_index(BENCHMARKS["TRQA"], {"label": "T", "question_type": "true_false"}, []) == 0
    assert answer_index(BENCHMARKS["RCW"], {"label_new": "y", "answer_index": 0}, ["x", "y"]) == 0
    assert answer_index(BENCHMARKS["ETI"], {"label": "y", "answer_index": 0}, ["x", "y"]) == 1   # ETI ignores it
    assert cot_windows([{"role": "assistant", "content": '"ts_seg": [3, 9] then "ts_seg": [10, 20]'},
                        {"role": "user", "content": '"ts_seg": [0, 1]'}]) == [[3, 9], [10, 20]]
    root = write_benchmarks(tmp_path / "bench", n=8)
    eti = read_split(root, "ETI", "train")
    rcw = read_split(root, "RCW", "test", limit=3)
    assert len(eti) == 8 and len(rcw) == 3
    assert all(r["family"] == "ETI" and r["n_options"] == 4 and len(r["cot_windows"]) == 1 for r in eti)
    assert all(r["family"] == "RCW" and r["options"][r["answer"]] in ("no right whale call", "a right whale call")
               for r in rcw)


def _paper_cfg(**paper):
    from components.artist.config import ArtistConfig

    return ArtistConfig.for_profile("paper", {"paper": paper})


def test_paper_preflight_names_the_key_in_one_line(tmp_path, tiny_checkpoints):
    from components.common.preflight import PreflightError
    from tests.artist.paper_files import write_benchmarks

    root = write_benchmarks(tmp_path / "bench")
    model = str(tiny_checkpoints.checkpoint("qwen3"))
    with pytest.raises(PreflightError, match=r"^paper\.model_path = '' is not set") as err:
        _paper_cfg(benchmark_root=str(root), benchmarks=["ETI"]).preflight()
    assert "\n" not in str(err.value)
    with pytest.raises(PreflightError, match=r"^paper\.model_path = .* is not a checkpoint"):
        _paper_cfg(model_path=str(tmp_path), benchmark_root=str(root), benchmarks=["ETI"]).preflight()
    with pytest.raises(PreflightError, match=r"^paper\.benchmark_root = .* is not a folder"):
        _paper_cfg(model_path=model, benchmark_root=str(tmp_path / "none"), benchmarks=["ETI"]).preflight()
    with pytest.raises(PreflightError, match=r"^paper\.benchmark_root = .*tsqa/train\.json\(l\) not found"):
        _paper_cfg(model_path=model, benchmark_root=str(root), benchmarks=["ETI", "TSQA"]).preflight()
    (root / "rcw" / "val.json").write_text(json.dumps({"ecg": [1.0, 2.0], "question": "q", "options": ["a"],
                                                       "label_new": "zzz"}) + "\n")
    with pytest.raises(PreflightError, match=r"^paper\.benchmark_root = .*rcw/val\.json:1: label 'zzz'"):
        _paper_cfg(model_path=model, benchmark_root=str(root), benchmarks=["RCW"]).preflight()
    with pytest.raises(ValueError, match=r"paper\.benchmarks = \['XYZ'\]"):
        _paper_cfg(model_path=model, benchmark_root=str(root), benchmarks=["XYZ"]).preflight()
    _paper_cfg(model_path=model, benchmark_root=str(root), benchmarks=["ETI"]).preflight()     # passes


def test_paper_profile_declares_a_gpu_for_the_policy_stages_only():
    from flows.artist import METHOD

    paper = {s.name: s.resources.gpus("paper") for s in METHOD.stages}
    small = {s.name: s.resources.gpus("small") for s in METHOD.stages}
    assert paper["sft"] == paper["rl"] == paper["evaluate"] == 1
    assert paper["generate_tasks"] == paper["train_static"] == paper["report"] == 0
    assert set(small.values()) == {0}


def test_small_profile_keeps_the_tiny_policy_and_drops_static_total():
    from components.artist.config import ArtistConfig

    cfg = ArtistConfig.for_profile("small")
    assert not cfg.lm.enabled and not cfg.paper.enabled
    assert cfg.baselines.static_variants == ["static"]
    paper = ArtistConfig.for_profile("paper")
    assert paper.lm.enabled and paper.lm.sft_lora and paper.lm.rl_lora and paper.evaluate.runs == 8
    assert (paper.rl.reasoner_rollouts, paper.rl.controller_temperature, paper.rl.reasoner_temperature) == (6, 1.0, 0.7)
