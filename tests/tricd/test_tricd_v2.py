"""The v2 setting: a backbone whose visual tokens see 4x4 patches of 32x32 frames, grounding
targets for its vision tower, the premise measurements, and the router's entropy bonus."""
import numpy as np
import pandas as pd
import pytest
import torch

from components.tricd import video as V
from components.tricd.config import TricdConfig
from components.tricd.model import ToyVLLM, build_vocab, grounding_loss

torch.set_num_threads(1)


def test_default_objects_are_resolved_by_the_patches():
    """Regression (issue 39): 16x16 frames with 8x8 patches drew 5-px objects at ~3 px, four
    tokens a frame, and the backbone never saw them. Objects must now span >= 6 px and be cut
    into 4x4-pixel patches."""
    cfg = TricdConfig()
    assert V.OBJ * cfg.bench.size / cfg.bench.world >= 6
    assert cfg.backbone.patch <= 4


@pytest.mark.parametrize("merge,tpatch", [(1, 1), (2, 1), (4, 2), (2, 4)])
def test_merged_tokens_see_only_their_own_region(merge, tpatch):
    torch.manual_seed(0)
    model = ToyVLLM(len(build_vocab()), frames=4, size=16, patch=2, d_model=8, n_layers=1,
                    n_heads=2, max_text=8, merge=merge, tpatch=tpatch, align=True).eval()
    assert model.token_px == 2 * merge and model.n_visual == 4 // tpatch * (16 // (2 * merge)) ** 2
    video = torch.zeros(1, 4, 16, 16, 3)
    base = model.vision_tower(video)
    video[0, 2, 9, 3] = 255.0                        # one pixel of frame 2
    changed = (model.vision_tower(video) - base).abs().sum(-1)[0] > 0
    cell = (9 // model.token_px) * model.grid + 3 // model.token_px
    expected = torch.zeros_like(changed)
    expected[2 // tpatch, cell] = True
    assert torch.equal(changed, expected)
    text = torch.tensor([[0, 0, 1]])
    logits, hidden = model(video, text)
    assert hidden.shape == (1, 2 + model.n_visual + 1, 8)


def test_merge_one_keeps_the_row_major_patch_layout():
    model = ToyVLLM(len(build_vocab()), frames=1, size=8, patch=4, d_model=8, n_layers=1,
                    n_heads=2, max_text=8)
    video = torch.arange(8 * 8 * 3, dtype=torch.float).reshape(1, 1, 8, 8, 3)
    patches = model.patches(video)[0, 0, :, 0]        # (4 tokens, 48)
    x = (video / 255.0 - 0.5) / 0.25
    torch.testing.assert_close(patches[1], x[0, 0, :4, 4:8].reshape(-1))   # top-right patch
    torch.testing.assert_close(patches[2], x[0, 0, 4:8, :4].reshape(-1))   # bottom-left patch


def test_frames_of_any_size_show_the_same_view():
    """Regression: the still camera's crop was `size` world pixels, so 32-px frames looked past
    the 24-px world (edges smeared, pans running backwards). The view is now resampled."""
    rng = np.random.default_rng(5)
    for camera in ("still", "zooms_in"):
        prog = V.sample_scene(rng, 8, 24)
        prog["camera"] = camera
        small, large = V.render(prog, 16), V.render(prog, 32)
        if camera == "still":
            np.testing.assert_array_equal(large, small.repeat(2, axis=1).repeat(2, axis=2))
        else:   # same content up to resampling: mean colours agree
            assert np.abs(large.mean((1, 2)) - small.mean((1, 2))).max() < 12
    prog["camera"] = "pans_right"
    x0, x1 = V.camera_window("pans_right", 0, 8, 24, 16)[0], V.camera_window("pans_right", 7, 8, 24, 16)[0]
    assert (x0, x1) == (0, 8)


def test_token_labels_follow_the_object_and_the_camera():
    obj = {"shape": "circle", "color": "red", "motion": "still", "x0": 4, "y0": 4, "event": "none",
           "t_event": -1}
    other = dict(obj, shape="square", color="blue", x0=14, y0=14, event="appears", t_event=3)
    program = {"scene": "grass", "camera": "still", "bg_x": 0, "bg_y": 0, "frames": 4, "world": 24,
               "objects": [obj, other]}
    labels = V.token_labels(program, size=32, token_px=16)       # 2x2 tokens a frame
    red, blue = V.PAIRS.index(("red", "circle")), V.PAIRS.index(("blue", "square"))
    assert labels.shape == (4, 4, 12 + 5)
    still = 12 + V.MOTIONS.index("still")
    assert labels[:, 0, still].tolist() == [1, 1, 1, 1]
    # still camera: a 16-px view at (4, 4), drawn 2x; red centre 6.5 -> frame (5, 5), top-left
    assert labels[:, 0, red].tolist() == [1, 1, 1, 1] and labels[:, 1:, red].sum() == 0
    # blue centre 16.5 -> frame (25, 25): bottom-right token, visible from frame 3 on
    assert labels[:, 3, blue].tolist() == [0, 0, 0, 1]
    assert labels.sum() == 10
    tubelets = V.token_labels(program, size=32, token_px=16, tpatch=2)   # frames (0, 1), (2, 3)
    assert tubelets.shape == (2, 4, 17) and tubelets[:, 3, blue].tolist() == [0, 1]
    np.testing.assert_array_equal(tubelets, labels.reshape(2, 2, 4, 17).max(1))


def test_grounding_loss_is_finite_and_trains_the_vision_tower():
    torch.manual_seed(0)
    model = ToyVLLM(len(build_vocab()), frames=2, size=16, patch=4, d_model=16, n_layers=1,
                    n_heads=2, max_text=8, merge=2)
    video = torch.randint(0, 255, (3, 2, 16, 16, 3)).float()
    pairs = torch.zeros(3, 2, 4, 17)
    pairs[:, :, 0, 5] = 1
    loss = grounding_loss(model, video, pairs, torch.tensor([0, 1, 2]))
    loss.backward()
    assert torch.isfinite(loss) and model.patch_embed.weight.grad.abs().sum() > 0


def test_premise_quantities():
    from components.tricd.backbone import isolated_macro, yes_bias

    assert isolated_macro({"acc_s_yn": 0.7, "acc_s_mc": 0.5}) == pytest.approx(0.6)
    qa = pd.DataFrame({"task": ["s_yn", "c_yn", "s_yn", "s_mc"],
                       "types": [["camera"], ["object", "temporal"], ["object"], ["camera"]],
                       "answer": ["no", "yes", "no", "A"]})
    pred = np.array(["yes", "yes", "no", "yes"])
    # biased-type YN items: rows 0, 1 -> predicted yes 2/2, true yes 1/2
    assert yes_bias(qa, pred, ["camera", "temporal"]) == pytest.approx(0.5)
    assert yes_bias(qa, pred, ["camera", "temporal"], biased=False) == pytest.approx(0.0)


def test_entropy_bonus_pushes_tool_probabilities_to_one_half():
    """Regression (issue 39): with zero advantage the old loss had no gradient at all, so
    nothing held the router back from collapsing; the entropy bonus moves p toward 1/2."""
    from components.tricd.policy import bernoulli_entropy, policy_loss

    probs = torch.tensor([[0.9, 0.2, 0.5]], requires_grad=True)
    assert bernoulli_entropy(probs).item() == pytest.approx(
        float(np.mean([-(p * np.log(p) + (1 - p) * np.log(1 - p)) for p in (0.9, 0.2, 0.5)])), rel=1e-5)
    cfg = TricdConfig.for_profile("small", overrides={"policy": {"entropy_coef": 0.05}}).policy
    logp = torch.zeros(1, requires_grad=True)
    state = {"baseline": 1.0}                   # reward == baseline -> zero advantage
    policy_loss(logp, probs, np.array([1.0]), state, cfg).backward()
    g = probs.grad[0]
    assert g[0] > 0 and g[1] < 0 and abs(g[2]) < 1e-6        # descent raises 0.2, lowers 0.9
