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
    assert "<image>" not in tok.vocab and len(ids) == len(sup)
    # LLaVA-1.5's vicuna_v1 prompt: <bos> system USER: [image here] ...
    prefix = llava.prompt_prefix(tok)
    assert ids[:len(prefix)] == prefix and prefix[0] == 1 and prefix[-1] == tok.vocab["USER:"]
    assert tok.vocab["questions."] in prefix
    short, short_sup = llava.encode_conversation(tok, turns, max_len=len(prefix) + 3)
    assert len(short) == len(short_sup) == len(prefix) + 3
    with pytest.raises(ValueError, match="no room after the"):
        llava.encode_conversation(tok, turns, max_len=len(prefix))


def test_expand_to_square_centres_on_the_fill_colour():
    from PIL import Image

    wide = Image.fromarray(np.full((2, 4, 3), 200, np.uint8))          # width 4, height 2
    square = np.asarray(llava.expand_to_square(wide, (1, 2, 3)))
    assert square.shape == (4, 4, 3)
    assert (square[[0, 3]] == [1, 2, 3]).all() and (square[1:3] == 200).all()
    tall = np.asarray(llava.expand_to_square(Image.fromarray(np.zeros((5, 2, 3), np.uint8)), (9, 9, 9)))
    assert tall.shape == (5, 5, 3) and (tall[:, [0, 3, 4]] == 9).all() and (tall[:, 1:3] == 0).all()


def test_wide_images_are_padded_with_the_mean_colour_not_stretched(tmp_path):
    """LLaVA-1.5 (image_aspect_ratio = pad): the bands above and below a wide image are the
    processor's mean colour, i.e. ~0 after normalisation; a plain resize has no such band."""
    from PIL import Image

    path = tmp_path / "wide.png"
    Image.fromarray(np.full((8, 16, 3), 255, np.uint8)).save(path)            # white, 16 wide, 8 high
    padded = pixel_values(llava.load_images([str(path)], 16, llava.CLIP_MEAN, llava.CLIP_STD))[0]
    assert padded[:, :3].abs().max() < 0.02 and padded[:, -3:].abs().max() < 0.02   # mean-colour bands
    white = (1 - torch.tensor(llava.CLIP_MEAN)) / torch.tensor(llava.CLIP_STD)
    assert torch.allclose(padded[:, 8, 8], white, atol=1e-3)                  # the image in the middle
    stretched = pixel_values(llava.load_images([str(path)], 16, llava.CLIP_MEAN, llava.CLIP_STD, pad=False))[0]
    assert torch.allclose(stretched[:, 0, 0], white, atol=1e-3)


def test_image_tokens_can_follow_a_prompt_prefix():
    """text_logits(image_at=k) gives, for each text token, the logit of the full sequence
    [first k tokens, image tokens, the rest] at the position just before it."""
    from components.common.tiny_models import build_tiny
    from components.vig.model import n_image_tokens, text_logits

    model = build_tiny("llava", seed=0).eval()
    n, size = n_image_tokens(model), model.config.vision_config.image_size
    images = torch.rand(2, 3, size, size) * 255
    tokens = torch.randint(4, 400, (2, 9))
    for k in (1, 4):
        ids = torch.cat([tokens[:, :k], torch.full((2, n), model.config.image_token_index), tokens[:, k:]], 1)
        with torch.no_grad():
            full = model(input_ids=ids, pixel_values=pixel_values(images)).logits
            got = text_logits(model, images, tokens, image_at=k)
        before = [j - 1 if j < k else j - 1 + n for j in range(1, tokens.shape[1])]   # predicts token j
        assert got.shape[1] == tokens.shape[1] - 1
        assert torch.allclose(got, full[:, before], atol=1e-4)


