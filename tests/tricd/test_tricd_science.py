"""Science of tricd: generator ground truth, adversarial options, decoding formula, tools,
saliency, REINFORCE on a contextual bandit."""
import json

import numpy as np
import pytest
import torch

from components.tricd import benchmark as B
from components.tricd import tools as T
from components.tricd import video as V
from components.tricd.decode import ANSWER_TOKENS, MAX_TEXT, calibrate, predict, score
from components.tricd.model import build_vocab

torch.set_num_threads(1)
KW = dict(frames=8, size=16, world=24, bias=0.35, biased_types=["temporal", "camera"],
          adversarial_rate=0.67)


@pytest.fixture(scope="module")
def bench():
    rng = np.random.default_rng(0)
    return {split: B.build_split(split, 60, 2, rng, **KW) for split in ("pretrain", "test")}


# ---- generator ground truth -------------------------------------------------------------
def test_every_answer_is_rederived_from_the_scene_program(bench):
    for videos, programs, items in bench.values():
        assert len(items) >= 60 * 4
        for item in items:
            assert B.check_answer(programs[item["video"]], item) == item["answer"]


def test_questions_fit_the_vocabulary_and_context(bench):
    vocab = set(build_vocab())
    for _, _, items in bench.values():
        for item in items:
            words = item["question"].split()
            assert set(words) <= vocab and len(words) + 1 <= MAX_TEXT


def test_rendered_video_matches_the_program():
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(80):
        prog = V.sample_scene(rng, 8, 24)
        prog["camera"] = "still"        # still camera: world -> frame is a fixed crop offset 4
        video = V.render(prog, 16)
        for obj in prog["objects"]:
            for t in range(8):
                x, y = V.object_position(obj, t, 24)
                cx, cy = x + V.OBJ // 2 - 4, y + V.OBJ // 2 - 4        # object centre in frame
                other = [o for o in prog["objects"] if o is not obj and V.visible(o, t)]
                occluded = any(abs(V.object_position(o, t, 24)[0] - x) < V.OBJ and
                               abs(V.object_position(o, t, 24)[1] - y) < V.OBJ for o in other)
                if occluded:
                    continue
                pixel = video[t, cy, cx].astype(int)
                is_obj = np.abs(pixel - np.array(V.COLORS[obj["color"]])).max() <= 1
                assert is_obj == V.visible(obj, t), (obj, t, pixel)
                checked += 1
    assert checked > 500


def test_camera_pan_moves_content_and_zoom_magnifies():
    rng = np.random.default_rng(2)
    prog = V.sample_scene(rng, 8, 24)
    prog["objects"] = []
    world = V.render_world(prog, 0)
    prog["camera"] = "pans_right"
    video = V.render(prog, 16)
    np.testing.assert_array_equal(video[0], np.clip(world[4:20, 0:16], 0, 255).astype(np.uint8))
    np.testing.assert_array_equal(video[-1], np.clip(world[4:20, 8:24], 0, 255).astype(np.uint8))
    prog["camera"] = "zooms_in"
    assert V.camera_window("zooms_in", 7, 8, 24, 16)[2] < V.camera_window("zooms_in", 0, 8, 24, 16)[2]


def test_pretrain_is_biased_and_benchmark_splits_are_balanced():
    rng = np.random.default_rng(3)
    kw = {**KW, "biased_types": ["temporal", "camera", "action"]}
    _, _, pre = B.build_split("pretrain", 150, 2, rng, **kw)
    _, _, test = B.build_split("test", 150, 2, rng, **kw)
    yes = lambda items, kinds: np.mean([i["answer"] == "yes" for i in items  # noqa: E731
                                        if i["task"] == "s_yn" and i["types"][0] in kinds])
    assert yes(pre, ["temporal", "camera", "action"]) > 0.75
    assert abs(yes(test, ["temporal", "camera", "action"]) - 0.5) < 0.15
    assert abs(yes(pre, ["scene", "object"]) - 0.5) < 0.15


# ---- adversarial options ---------------------------------------------------------------------
def test_adversarial_options_are_correct_exactly_when_they_should_be(bench):
    seen = {"none": [0, 0], "all": [0, 0]}
    for _, programs, items in bench.values():
        for item in items:
            if item["task"].endswith("yn"):
                continue
            clauses = [tuple(c) for c in json.loads(item["clauses"])]
            truths = [B.truth(programs[item["video"]], c) for c in clauses]
            if item["adversarial"] == "none":
                assert item["options"][2] == B.NONE_OPTION
                assert (item["answer"] == "C") == (not any(truths))
                assert any(truths) or item["answer"] == "C"
            elif item["adversarial"] == "all":
                assert item["options"][2] == B.ALL_OPTION
                assert (item["answer"] == "C") == all(truths)
            else:
                assert sum(truths) == 1 and item["answer"] == "ABC"[truths.index(True)]
            if item["adversarial"]:
                seen[item["adversarial"]][item["answer"] == "C"] += 1
                if item["answer"] != "C":
                    assert sum(truths) == 1 and item["answer"] == "AB"[truths.index(True)]
    assert all(a > 0 and b > 0 for a, b in seen.values())   # both outcomes occur for both kinds


def test_compositional_items_mix_types_and_false_conjunctions_have_one_false_clause(bench):
    _, programs, items = bench["test"]
    for item in items:
        if item["task"] == "c_yn":
            clauses = [tuple(c) for c in json.loads(item["clauses"])]
            assert len({c[0] for c in clauses}) == len(clauses) >= 2
            truths = [B.truth(programs[item["video"]], c) for c in clauses]
            assert sum(not t for t in truths) == (0 if item["answer"] == "yes" else 1)


# ---- decoding formula -----------------------------------------------------------------------
def test_triple_pathway_formula_on_fixed_logits():
    g = torch.Generator().manual_seed(0)
    q_o, q_p, q_n = (torch.randn(50, 5, generator=g) for _ in range(3))
    torch.testing.assert_close(calibrate(q_o, q_p, q_n, 0.0, 0.0), q_o)          # no pathway = base
    torch.testing.assert_close(calibrate(q_o, q_o, q_o, 0.0, 1.0), q_o)          # neg video = original
    torch.testing.assert_close(calibrate(q_o, q_p, q_n, 1.0, 1.0), q_p + q_o - q_n)   # official code
    torch.testing.assert_close(calibrate(q_o, q_p, q_n, 0.5, 2.0),
                               q_o + 0.5 * (q_p - q_o) + 2.0 * (q_o - q_n))
    # VCD on a language prior: q_o = prior + evidence, q_n = prior -> contrast removes the prior
    prior, evidence = torch.tensor([[3.0, 0.0]]), torch.tensor([[-1.0, 1.0]])
    vcd = calibrate(prior + evidence, prior + evidence, prior, 0.0, 1.0)
    assert (prior + evidence).argmax() == 0                     # the prior wins in plain decoding
    assert vcd.argmax() == 1 and (vcd - (prior + 2 * evidence)).abs().max() < 1e-6


def test_constrained_prediction_and_scores():
    q = np.array([[0.0, 1.0, 9.0, 0.0, 0.0],     # YN item: the large A logit must be ignored
                  [5.0, 0.0, 0.0, 1.0, 2.0]])    # MC item: yes must be ignored
    pred = predict(q, ["s_yn", "s_mc"])
    assert list(pred) == ["no", "C"] and set(ANSWER_TOKENS) == {"yes", "no", "A", "B", "C"}
    import pandas as pd
    qa = pd.DataFrame({"task": ["s_yn", "c_yn", "s_mc", "c_mc"], "answer": ["yes", "no", "A", "B"],
                       "compositional": [False, True, False, True],
                       "types": [["scene"], ["scene", "camera"], ["camera"], ["object", "event"]]})
    s = score(qa, ["yes", "yes", "A", "A"])
    assert s["macro"] == 0.5 and s["isolated"] == 1.0 and s["compositional"] == 0.0
    assert s["type_scene"] == 0.5 and s["type_camera"] == 0.5 and s["type_event"] == 0.0


# ---- perturbation operators -----------------------------------------------------------------
@pytest.fixture
def clip():
    return torch.rand(10, 16, 16, 3, generator=torch.Generator().manual_seed(0)) * 255


def test_tool_algebra(clip):
    torch.testing.assert_close(T.reverse(T.reverse(clip)), clip)
    torch.testing.assert_close(T.hflip(T.hflip(clip)), clip)
    torch.testing.assert_close(T.vflip(T.vflip(clip)), clip)
    g = T.grayscale(clip)
    torch.testing.assert_close(T.grayscale(g), g, atol=1e-3, rtol=1e-4)
    assert torch.allclose(g[..., 0], g[..., 1]) and torch.allclose(g[..., 1], g[..., 2])
    torch.testing.assert_close(T.hflip(clip)[:, :, 0], clip[:, :, -1])
    torch.testing.assert_close(T.reverse(clip)[0], clip[-1])


def test_sample_and_shuffle(clip):
    kept = T.keep_indices(10, 0.4)
    assert kept[0] == 0 and kept[-1] == 9 and len(kept) == round(0.4 * 10)
    s = T.sample_frames(clip, 0.4)
    assert s.shape == clip.shape
    frames = {int(i) for i in range(10) for j in kept if torch.equal(s[i], clip[j])}
    assert frames == set(range(10))                     # every frame is one of the kept ones
    assert len({tuple(s[i].flatten()[:4].tolist()) for i in range(10)}) == len(kept)
    sh = T.shuffle(clip, 2025)
    torch.testing.assert_close(sh[0], clip[0])
    torch.testing.assert_close(sh[-1], clip[-1])
    assert sorted(sh.sum(dim=(1, 2, 3)).tolist()) == sorted(clip.sum(dim=(1, 2, 3)).tolist())
    assert not torch.equal(sh, clip)
    torch.testing.assert_close(T.shuffle(clip, 2025), sh)      # fixed seed


def test_blur_noise_and_apply_order(clip):
    flat = torch.full((4, 16, 16, 3), 100.0)
    torch.testing.assert_close(T.blur(flat, 1.0), flat)                 # constant stays constant
    assert T.blur(clip, 1.0).std() < clip.std()                         # smoother
    n = T.noise(flat, 25.0, torch.Generator().manual_seed(0))
    assert abs(float((n - flat).std()) - 25.0) < 1.0 and n.min() >= 0 and n.max() <= 255
    both = T.apply_tools(clip, ["hflip", "reverse"])
    torch.testing.assert_close(both, T.hflip(T.reverse(clip)))
    mask = [name in ("grayscale", "vflip") for name in T.TOOL_NAMES]
    torch.testing.assert_close(T.apply_tools(clip, mask), T.grayscale(T.vflip(clip)))
    torch.testing.assert_close(T.apply_tools(clip, []), clip)
    with pytest.raises(ValueError):
        T.apply_tools(clip, ["rotate"])


# ---- saliency ----------------------------------------------------------------------------
def test_motion_saliency_finds_the_moving_object():
    from components.tricd.saliency import motion_saliency, pool_to_tokens, spectral_residual, token_weights

    video = np.full((1, 8, 16, 16, 3), 60, np.uint8)
    for t in range(8):
        video[0, t, 2:7, 1 + t:6 + t] = (220, 40, 40)    # a square moving right in the top rows
    video[0, :, 11:15, 10:14] = (40, 80, 230)            # a static square at the bottom right
    w_m = motion_saliency(video)
    assert w_m.shape == (1, 8, 16, 16) and 0 <= w_m.min() and w_m.max() <= 1
    assert w_m[0, 3:, 1:9].mean() > 5 * w_m[0, 3:, 10:16, 9:15].mean()
    w_v = spectral_residual(video)
    assert w_v.shape == (1, 8, 16, 16) and np.isclose(w_v.max(), 1.0)
    pooled = pool_to_tokens(torch.from_numpy(w_m), 8)
    assert pooled.shape == (1, 8, 4)
    torch.testing.assert_close(pooled[0, :, 0], torch.from_numpy(w_m[0, :, :8, :8]).mean(dim=(1, 2)))
    w = token_weights(pooled, pooled * 0, torch.tensor([1.0]))
    torch.testing.assert_close(w, torch.sigmoid(pooled))


# ---- REINFORCE ---------------------------------------------------------------------------------
@pytest.mark.parametrize("tool_ids, tool_id_std", [
    (False, 1.0),
    (True, 0.1),     # v5: the tool-identity embedding initialised at N(0, 0.1^2) (5 of 5 seeds)
    pytest.param(True, 1.0, marks=pytest.mark.xfail(strict=True, reason=(
        "v4 init N(0, 1) of the tool-identity embedding: the router fails this per-context bandit in "
        "4 of 5 seeds (it picks one context's tool, or none, everywhere); CLAIMS.md, Calibration v5"))),
])
def test_reinforce_router_learns_the_best_tool_per_context(tool_ids, tool_id_std):
    """Contextual bandit: two contexts, one rewarded tool each (all others penalised).
    lr 1e-3 x 400 steps (was 1e-2 x 150, which passed for 1 of 5 seeds only: Adam's noise steps
    saturate the router before the rare exact-one-hot rewards register)."""
    from components.tricd.probe_bandit import train_bandit_router, routes_each_context_to_its_tool

    probs = train_bandit_router(seed=0, lr=1e-3, steps=400, tool_ids=tool_ids, tool_id_std=tool_id_std)
    assert routes_each_context_to_its_tool(probs), probs


def test_baseline_and_advantage_order():
    from components.tricd.policy import reinforce_loss

    state = {"baseline": 0.0}
    logp = torch.zeros(2, requires_grad=True)
    loss = reinforce_loss(logp, np.array([1.0, -1.0]), state, 0.95)
    b1 = 0.05
    b2 = 0.95 * b1 - 0.05
    assert np.isclose(state["baseline"], b2)
    loss.backward()
    np.testing.assert_allclose(logp.grad.numpy(), -np.array([1 - b1, -1 - b2]) / 2, rtol=1e-6)
