"""Unit tests of VIG scoring and selection (no runtime, a few seconds on CPU)."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from components.vig.config import Model
from components.vig.data import (COLORS, PRIOR, SEQ_LEN, VOCAB, WORD_ID, Look, blur, draw_scene, encode,
                                 make_split, render)
from components.vig.model import build_model, sample_vig, text_logits, token_vig, vig_from_token_probs
from components.vig.score import colour_tokens_kept, select_tokens, top_fraction
from components.vig.train import random_matched_weights

SHARP = Look(object_side=4, contrast_min=1.0, contrast_max=1.0, color_jitter=0.0, distractor=False)
LOOK = Look()


def _tiny_llava():
    return build_model(Model(d_model=32, d_vision=16, n_layers=1), len(VOCAB), 16)


def test_vig_closed_form_fixture():
    # hand-computable fixture: log(PPL_blur / PPL_img) = mean log(p_img / p_blur)
    assert vig_from_token_probs([.20, .30, .25], [.70, .75, .65]) == pytest.approx(1.0415, abs=1e-4)
    assert vig_from_token_probs([.20, .30, .25], [.42, .46, .40]) == pytest.approx(0.5465, abs=1e-4)
    assert vig_from_token_probs([.70, .75, .65], [.20, .30, .25]) == pytest.approx(-1.0415, abs=1e-4)
    assert vig_from_token_probs([.62, .58, .60], [.61, .59, .60]) == pytest.approx(0.000278, abs=2e-6)


def test_sample_vig_is_log_perplexity_ratio():
    torch.manual_seed(0)
    l_img, l_blur = torch.rand(4, 6) * 3, torch.rand(4, 6) * 3
    mask = torch.tensor([[1, 1, 0, 1, 0, 0]] * 4).float()
    ppl = lambda l: torch.exp((l * mask).sum(1) / mask.sum(1))
    expected = torch.log(ppl(l_blur) / ppl(l_img))
    assert torch.allclose(sample_vig(l_blur - l_img, mask), expected, atol=1e-6)


class _Oracle(torch.nn.Module):
    """A constructed 'model': at the colour slot it reads the object's colour from the image when
    it is sharp (and falls back to the noun's prior otherwise); everything else is uniform."""
    n_patches = 0

    def __call__(self, images, tokens):
        logits = torch.zeros(len(tokens), tokens.shape[1] - 1, len(VOCAB))
        for i in range(len(tokens)):
            img = images[i].float()
            # the brightest-saturation pixel: a sharp object has a palette colour, a blurred one not
            flat = img.reshape(3, -1).T
            dist = torch.stack([(flat - torch.tensor(c, dtype=torch.float)).norm(dim=1).min()
                                for c in COLORS.values()])
            for pos in range(tokens.shape[1] - 1):
                if VOCAB[tokens[i, pos + 1]] in COLORS:
                    noun = next(VOCAB[t] for t in tokens[i] if VOCAB[t] in PRIOR)
                    if dist.min() < 1.0:     # sharp: the image determines the answer
                        logits[i, pos, WORD_ID[list(COLORS)[int(dist.argmin())]]] = 10.0
                    else:                    # blurred: only the text (prior) is left
                        logits[i, pos, WORD_ID[PRIOR[noun]]] = 3.0
        return logits


def _scene(color: str, noun: str, kind="color"):
    rng = np.random.default_rng(0)
    img = render(draw_scene(rng, 16, SHARP, color), color, "left", SHARP.object_side)
    prompt, answer = (f"what color is the {noun} ?", f"it is {color} .") if kind == "color" else \
        ("say hello .", "hello , how can i help ?")
    ids, sup, _ = encode(prompt, answer, SEQ_LEN)
    return torch.from_numpy(img)[None], torch.tensor([ids]), torch.tensor([sup])[:, 1:].float()


def test_vig_high_when_answer_needs_the_image_zero_when_text_decides(monkeypatch):
    import components.vig.model as vig_model

    monkeypatch.setattr(vig_model, "text_logits", lambda model, images, tokens, image_at=1: model(images, tokens))
    oracle = _Oracle()
    # bias-conflicting: only the image can say "green" for a banana -> large positive VIG
    img, ids, mask = _scene("green", "banana")
    _, _, d = token_vig(oracle, img, blur(img, 0.25), ids)
    conflicting = float(sample_vig(d, mask))
    colour_pos = int(torch.isin(ids[0, 1:], torch.tensor([WORD_ID[c] for c in COLORS])).int().argmax())
    # the gain sits on the colour token alone
    assert float(d[0].abs().sum()) == pytest.approx(float(d[0, colour_pos].abs())) and d[0, colour_pos] > 0
    # bias-aligned: the text prior already says "yellow" -> smaller VIG
    img, ids, mask = _scene("yellow", "banana")
    _, _, d = token_vig(oracle, img, blur(img, 0.25), ids)
    aligned = float(sample_vig(d, mask))
    # chit-chat: the answer is fully determined by the text -> VIG exactly 0
    img, ids, mask = _scene("yellow", "banana", kind="chit")
    _, _, d = token_vig(oracle, img, blur(img, 0.25), ids)
    assert float(sample_vig(d, mask)) == 0.0
    assert conflicting > aligned > 0


def test_zero_projector_and_zero_blur_give_zero_vig():
    torch.manual_seed(0)
    data = make_split(np.random.default_rng(1), 8, 16, LOOK, 0.9, ["color"], [1.0])
    model = _tiny_llava()
    _, _, d = token_vig(model, data["images"], blur(data["images"], 0.0), data["tokens"])
    assert torch.allclose(d, torch.zeros_like(d), atol=1e-5)       # sigma -> 0: no information gain
    _, _, d = token_vig(model, data["images"], blur(data["images"], 0.25), data["tokens"])
    assert d.abs().max() > 1e-4                                     # a random model does see the image
    projector = model.model.multi_modal_projector.linear_2
    torch.nn.init.zeros_(projector.weight), torch.nn.init.zeros_(projector.bias)
    _, _, d = token_vig(model, data["images"], blur(data["images"], 0.25), data["tokens"])
    assert torch.allclose(d, torch.zeros_like(d), atol=1e-5)       # LM cannot see the image


def test_blurred_control_differs_but_keeps_shape():
    data = make_split(np.random.default_rng(2), 4, 16, SHARP, 0.9, ["color"], [1.0])
    blurred = blur(data["images"], 0.25)
    assert blurred.shape == data["images"].shape
    diff = (blurred - data["images"].float()).abs().mean(dim=(1, 2, 3))
    assert bool((diff > 5.0).all())                                  # visibly different
    # global mean colour is (almost) preserved: blur removes detail, not the whole image
    assert torch.allclose(blurred.mean(dim=(2, 3)), data["images"].float().mean(dim=(2, 3)), atol=8.0)


@pytest.mark.parametrize("percent", [0.0, 30.0, 70.0, 100.0])
def test_top_fraction_selects_exactly_the_fraction(percent):
    scores = np.random.default_rng(0).normal(size=137)
    scores[:10] = 0.5                                                 # ties must not change the count
    keep = top_fraction(scores, percent)
    assert keep.sum() == round(percent / 100 * 137)
    if 0 < keep.sum() < len(scores):
        assert scores[keep].min() >= scores[~keep].max()


def test_token_mask_keeps_top_samples_and_tokens_above_tau():
    torch.manual_seed(0)
    n, t = 50, 8
    d = torch.randn(n, t)
    answer = (torch.rand(n, t) > 0.3).float()
    multimodal = np.arange(n) >= 5                                    # first 5 are text-only
    vig = sample_vig(d, answer).numpy()
    weights, tau, keep = select_tokens(d, answer, vig, multimodal, 70.0)
    assert keep.sum() == round(0.7 * 45) and not keep[~multimodal].any()
    assert tau == pytest.approx(vig[keep].min())
    assert torch.equal(weights[:5], answer[:5])                       # text-only: full loss
    dropped = torch.from_numpy(multimodal & ~keep)
    assert weights[dropped].sum() == 0
    kept = torch.from_numpy(keep)
    assert torch.equal(weights[kept], answer[kept] * (d[kept] >= tau).float())


def test_scenes_follow_the_prior_fraction():
    data = make_split(np.random.default_rng(3), 600, 16, LOOK, 0.9, ["color"], [1.0])
    conflict = np.mean([r["conflict"] for r in data["rows"]])
    assert abs(conflict - 0.1) < 0.04
    test = make_split(np.random.default_rng(4), 100, 16, LOOK, 0.9, ["color"], [1.0], conflict_frac=0.5)
    assert sum(r["conflict"] for r in test["rows"]) == 50
    align = make_split(np.random.default_rng(5), 600, 16, LOOK, 0.9, ["caption"], [1.0], align=True)
    counts = np.unique([r["color"] for r in align["rows"]], return_counts=True)[1]
    assert len(counts) == len(COLORS) and counts.min() > 60          # stage-1 colours carry no prior


def test_faint_objects_and_distractor_are_drawn_as_configured():
    rng = np.random.default_rng(6)
    alphas = [draw_scene(rng, 16, Look(contrast_max=0.4), "red").alpha for _ in range(200)]
    assert 0.0 <= min(alphas) and max(alphas) <= 0.4 and np.std(alphas) > 0.05
    scene = draw_scene(np.random.default_rng(7), 16, Look(contrast_min=1.0, contrast_max=1.0), "red")
    assert scene.distractor is not None and scene.distractor[0] != "red"
    img = render(scene, "red", "left", 3).transpose(1, 2, 0).astype(float)
    jittered = np.clip(np.asarray(COLORS["red"], float) + scene.jitter, 0, 255)
    patch = img[scene.row:scene.row + 3, scene.col:scene.col + 3].reshape(-1, 3)
    assert np.abs(patch - jittered).max() <= 1.0                      # opacity 1: the jittered colour


def test_text_logits_predict_the_stored_text_causally():
    torch.manual_seed(0)
    data = make_split(np.random.default_rng(8), 4, 16, SHARP, 0.9, ["caption"], [1.0])
    model = _tiny_llava()
    logits = text_logits(model, data["images"], data["tokens"])
    assert logits.shape == (4, SEQ_LEN - 1, len(VOCAB))
    changed = data["tokens"].clone()
    changed[:, 5] = WORD_ID["plus"]
    # position k predicts token k+1 from tokens <= k: editing token 5 leaves positions 0..4 alone
    after = text_logits(model, data["images"], changed)
    assert torch.allclose(logits[:, :5], after[:, :5], atol=1e-5)
    assert not torch.allclose(logits[:, 5:], after[:, 5:], atol=1e-5)


def test_random_control_matches_vig_in_samples_and_tokens():
    # the earlier "random" arm kept all tokens of 70 % of samples (4x VIG's tokens); this one must
    # match the VIG selection's multimodal sample count and token count exactly
    data = make_split(np.random.default_rng(9), 300, 16, LOOK, 0.9, ["caption", "color", "text"], [1, 1, 0.3])
    kinds = np.array([r["kind"] for r in data["rows"]])
    answer = data["supervised"][:, 1:].float()
    d = torch.randn(answer.shape, generator=torch.Generator().manual_seed(0))
    vig = sample_vig(d, answer).numpy()
    vig_w, _, keep = select_tokens(d, answer, vig, kinds != "text", 70.0)
    rand_w = random_matched_weights(data, kinds, vig_w, seed=3)
    mm = torch.from_numpy(kinds != "text")
    assert rand_w[mm].sum() == vig_w[mm].sum()
    assert (rand_w[mm].sum(1) > 0).sum() == (vig_w[mm].sum(1) > 0).sum() == keep.sum()
    assert torch.equal(rand_w[~mm], answer[~mm])                     # text-only: full loss in both
    assert bool((rand_w <= answer).all())                            # only answer tokens
    assert not torch.equal(rand_w, vig_w)
    assert torch.equal(rand_w, random_matched_weights(data, kinds, vig_w, seed=3))


def test_colour_whose_vig_is_zero_is_reported_as_dropped():
    # the old VIG arm lost "green": the scorer answered green for every blurred image, so green
    # tokens had d_t ~ 0 and none survived the tau mask; the selection now reports that directly
    data = make_split(np.random.default_rng(10), 300, 16, LOOK, 0.9, ["color"], [1.0])
    answer = data["supervised"][:, 1:].float()
    targets = data["tokens"][:, 1:]
    d = torch.where(torch.isin(targets, torch.tensor([WORD_ID[c] for c in COLORS])), 3.0, 0.0)
    d[targets == WORD_ID["green"]] = 0.0
    weights, _, _ = select_tokens(d, answer, sample_vig(d, answer).numpy(), np.ones(300, bool), 70.0)
    kept = colour_tokens_kept(data, weights)
    assert kept["colour_kept_green"] == 0.0 == kept["colour_kept_min"]
    assert kept["colour_kept_red"] > 0.5
