"""Unit tests of the paper path's pieces (components.vig.llava): pixel scale, blur, labels, POPE."""
import numpy as np
import pytest
import torch

from components.vig import llava
from components.vig.data import blur
from components.vig.model import pixel_values


def _png(tmp_path, seed=0, size=12):
    from PIL import Image

    path = tmp_path / f"{seed}.png"
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
    return path


def test_stored_scale_maps_back_to_clip_normalisation(tmp_path):
    from PIL import Image

    path = _png(tmp_path)
    stored = llava.load_images([str(path)], 12, llava.CLIP_MEAN, llava.CLIP_STD)
    raw = np.asarray(Image.open(path).convert("RGB"), np.float32) / 255.0
    expected = (raw - np.asarray(llava.CLIP_MEAN, np.float32)) / np.asarray(llava.CLIP_STD, np.float32)
    assert torch.allclose(pixel_values(stored)[0], torch.from_numpy(expected.transpose(2, 0, 1)), atol=1e-5)


def test_blur_commutes_with_the_normalisation(tmp_path):
    """Blurring the stored scale = normalising the blurred image (linear, reflect-padded)."""
    path = _png(tmp_path, 1)
    stored = llava.load_images([str(path)], 12, llava.CLIP_MEAN, llava.CLIP_STD)
    unit = llava.load_images([str(path)], 12, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))   # pixel_values -> x in [0, 1]
    mean, std = torch.tensor(llava.CLIP_MEAN)[:, None, None], torch.tensor(llava.CLIP_STD)[:, None, None]
    via_raw = (pixel_values(blur(unit, 0.25)) - mean) / std          # blur x, then CLIP-normalise
    assert torch.allclose(pixel_values(blur(stored, 0.25)), via_raw, atol=1e-4)


def test_text_only_rows_get_the_same_image_blurred_or_not():
    grey = llava.load_images(["", ""], 8, llava.CLIP_MEAN, llava.CLIP_STD)
    assert torch.allclose(blur(grey, 0.25), grey, atol=1e-3)


class _WordTokenizer:
    """Whitespace tokenizer with bos 1 / eos 2 (just enough for encode_conversation)."""
    bos_token_id, eos_token_id = 1, 2

    def __init__(self):
        self.vocab = {}

    def __call__(self, text, add_special_tokens=False):
        ids = [self.vocab.setdefault(w, len(self.vocab) + 3) for w in text.split()]
        return type("Enc", (), {"input_ids": ids})()


def test_labels_are_the_answer_tokens_and_their_eos():
    tok = _WordTokenizer()
    turns = [{"from": "human", "value": "<image>\nwhat is it"}, {"from": "gpt", "value": "a cat"},
             {"from": "human", "value": "colour"}, {"from": "gpt", "value": "black"}]
    ids, sup = llava.encode_conversation(tok, turns, max_len=64)
    answers = [i for i, s in zip(ids, sup) if s]
    assert answers == [tok.vocab["a"], tok.vocab["cat"], 2, tok.vocab["black"], 2]
    assert ids[0] == 1 and "<image>" not in tok.vocab and len(ids) == len(sup)
    short, short_sup = llava.encode_conversation(tok, turns, max_len=5)
    assert len(short) == len(short_sup) == 5


def test_pope_metrics_closed_form():
    pred = np.array([True, True, False, False, True])
    label = np.array([True, False, False, True, True])
    m = llava.pope_metrics(pred, label)
    # tp 2, fp 1, fn 1: precision 2/3, recall 2/3, F1 2/3; 3 of 5 right; 3 of 5 said yes
    assert m["acc"] == pytest.approx(60.0) and m["yes_ratio"] == pytest.approx(60.0)
    assert m["precision"] == pytest.approx(200 / 3) and m["recall"] == pytest.approx(200 / 3)
    assert m["f1"] == pytest.approx(200 / 3)
