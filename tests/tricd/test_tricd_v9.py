"""v9 (issue 39): language sides that never read padding. The reader's and the packed causal
toy's answer logits do not depend on a batch's padding; the packed toy equals the causal toy on
the unpadded question; both keep the toy's forward signature and hidden-state layout."""
import numpy as np
import torch

from components.tricd import video as V
from components.tricd.decode import MAX_TEXT
from components.tricd.model import ToyVLLM, build_vocab, encode
from components.tricd.probe_lm import oracle_states
from components.tricd.reader import PackedVLLM, ReaderVLLM, packed_forward

torch.set_num_threads(1)
KW = dict(frames=8, size=32, patch=4, d_model=16, n_layers=2, n_heads=2, max_text=MAX_TEXT, merge=4,
          tpatch=2, align=True, camera=True, feat_scale=0.0)
QS = ["is it true that there is a red circle ?", "the scene is grass ?",
      "which is true ? A a red circle B a blue square C none of the above"]


def _tower(n, d=16):
    rng = np.random.default_rng(1)
    _, g = oracle_states([V.sample_scene(rng, 8, 24) for _ in range(n)], 32, 16, 2, d)
    return torch.randn(*g.shape[:3], d), g


def _texts(width):
    index = {w: i for i, w in enumerate(build_vocab())}
    return torch.tensor([encode(q, index, width) for q in QS])


def test_reader_logits_do_not_depend_on_padding_and_keep_the_layout():
    torch.manual_seed(0)
    model = ReaderVLLM(len(build_vocab()), **KW).eval()
    tower = _tower(len(QS))
    with torch.no_grad():
        wide, h = model(None, _texts(MAX_TEXT), tower=tower)
        narrow, _ = model(None, _texts(len(QS[2].split()) + 1), tower=tower)
        torch.testing.assert_close(wide, narrow)
        for i, q in enumerate(QS):   # each row alone, unpadded
            alone = model(None, _texts(MAX_TEXT)[i:i + 1, -(len(q.split()) + 1):],
                          tower=(tower[0][i:i + 1], tower[1][i:i + 1]))[0]
            torch.testing.assert_close(alone[0], wide[i], atol=1e-5, rtol=1e-5)
    assert wide.shape == (3, len(build_vocab()))
    assert h.shape == (3, MAX_TEXT - 1 + model.n_visual + 1, 16)
    # the positive pathway's weight reaches the logits
    w = torch.rand(3, model.n_visual)
    assert not torch.allclose(model(None, _texts(MAX_TEXT), visual_weight=w, tower=tower)[0], wide)


def test_packed_forward_equals_the_unpadded_causal_toy():
    torch.manual_seed(0)
    model = ToyVLLM(len(build_vocab()), **KW).eval()
    tower = _tower(len(QS))
    with torch.no_grad():
        packed, h = packed_forward(model, _texts(MAX_TEXT), tower=tower)
        for i, q in enumerate(QS):
            tight = _texts(MAX_TEXT)[i:i + 1, -(len(q.split()) + 1):]
            ref, href = model(None, tight, tower=(tower[0][i:i + 1], tower[1][i:i + 1]))
            torch.testing.assert_close(packed[i], ref[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(h[i, -href.shape[1]:], href[0], atol=1e-5, rtol=1e-5)
        # and the left-padded toy differs (it reads its pads)
        assert not torch.allclose(model(None, _texts(MAX_TEXT), tower=tower)[0], packed)
        sub = PackedVLLM(len(build_vocab()), **KW).eval()
        sub.load_state_dict(model.state_dict())
        torch.testing.assert_close(sub(None, _texts(MAX_TEXT), tower=tower)[0], packed)
