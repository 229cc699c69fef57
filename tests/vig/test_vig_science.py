"""Unit tests of VIG scoring and selection (no runtime, a few seconds on CPU)."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from components.vig.data import (COLORS, PRIOR, SEQ_LEN, VOCAB, WORD_ID, background, blur, encode,
                                 make_split, object_box, render)
from components.vig.model import TinyVLM, sample_vig, token_vig, vig_from_token_probs
from components.vig.score import select_tokens, top_fraction


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
    img = render(background(rng, 16), color, "left", object_box(rng, 16))
    prompt, answer = (f"what color is the {noun} ?", f"it is {color} .") if kind == "color" else \
        ("say hello .", "hello , how can i help ?")
    ids, sup, _ = encode(prompt, answer, SEQ_LEN)
    return torch.from_numpy(img)[None], torch.tensor([ids]), torch.tensor([sup])[:, 1:].float()


def test_vig_high_when_answer_needs_the_image_zero_when_text_decides():
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
    data = make_split(np.random.default_rng(1), 8, 16, 0.9, ["color"], [1.0])
    model = TinyVLM(len(VOCAB), 16, SEQ_LEN, d_model=32, d_vision=8, n_layers=1)
    _, _, d = token_vig(model, data["images"], blur(data["images"], 0.0), data["tokens"])
    assert torch.allclose(d, torch.zeros_like(d), atol=1e-5)       # sigma -> 0: no information gain
    torch.nn.init.zeros_(model.projector.weight), torch.nn.init.zeros_(model.projector.bias)
    _, _, d = token_vig(model, data["images"], blur(data["images"], 0.25), data["tokens"])
    assert torch.allclose(d, torch.zeros_like(d), atol=1e-5)       # LM cannot see the image


def test_blurred_control_differs_but_keeps_shape():
    data = make_split(np.random.default_rng(2), 4, 16, 0.9, ["color"], [1.0])
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
    data = make_split(np.random.default_rng(3), 600, 16, 0.9, ["color"], [1.0])
    conflict = np.mean([r["conflict"] for r in data["rows"]])
    assert abs(conflict - 0.1) < 0.04
    test = make_split(np.random.default_rng(4), 100, 16, 0.9, ["color"], [1.0], conflict_frac=0.5)
    assert sum(r["conflict"] for r in test["rows"]) == 50
