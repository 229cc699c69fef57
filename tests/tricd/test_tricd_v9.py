"""v9 (issue 39): language sides that never read padding. The reader's and the packed causal
toy's answer logits do not depend on a batch's padding; the packed toy equals the causal toy on
the unpadded question; both keep the toy's forward signature and hidden-state layout."""
import numpy as np
import pytest
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


@pytest.mark.parametrize("video_first", [False, True])    # v11: the video-first layout too
def test_packed_forward_equals_the_unpadded_causal_toy(video_first):
    torch.manual_seed(0)
    kw = {**KW, "video_first": video_first}
    model = ToyVLLM(len(build_vocab()), **kw).eval()
    tower = _tower(len(QS))
    n_vis = model.n_visual
    with torch.no_grad():
        packed, h = packed_forward(model, _texts(MAX_TEXT), tower=tower)
        for i, q in enumerate(QS):
            tight = _texts(MAX_TEXT)[i:i + 1, -(len(q.split()) + 1):]
            ref, href = model(None, tight, tower=(tower[0][i:i + 1], tower[1][i:i + 1]))
            torch.testing.assert_close(packed[i], ref[0], atol=1e-5, rtol=1e-5)
            if video_first:   # [visual][question][<ans>]: the visual block and the question's tail
                torch.testing.assert_close(h[i, :n_vis], href[0, :n_vis], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(h[i, -(href.shape[1] - n_vis):], href[0, n_vis:], atol=1e-5, rtol=1e-5)
            else:
                torch.testing.assert_close(h[i, -href.shape[1]:], href[0], atol=1e-5, rtol=1e-5)
        # and the left-padded toy differs (it reads its pads)
        assert not torch.allclose(model(None, _texts(MAX_TEXT), tower=tower)[0], packed)
        sub = PackedVLLM(len(build_vocab()), **kw).eval()
        sub.load_state_dict(model.state_dict())
        torch.testing.assert_close(sub(None, _texts(MAX_TEXT), tower=tower)[0], packed)


def test_backbone_lm_option_builds_each_language_side():
    import pytest

    from components.tricd.backbone import make_backbone
    from components.tricd.backbones import ToyBackbone
    from components.tricd.config import TricdConfig

    cfg = TricdConfig.for_profile("small")
    assert cfg.backbone.lm == "packed" and cfg.backbone.pretrain_qa_per_task == 20   # v12 default
    cfg = TricdConfig.for_profile("small", overrides={"backbone": {"lm": "causal", "compound": False,
                                                                   "video_first": False}})
    assert type(make_backbone(cfg.bench, cfg.backbone)) is ToyVLLM                  # v1-v8
    index = {w: i for i, w in enumerate(build_vocab())}
    enc = torch.tensor([encode(q, index, MAX_TEXT) for q in QS])
    videos = torch.randint(0, 256, (3, 8, 32, 32, 3)).float()
    for lm, cls in (("reader", ReaderVLLM), ("packed", PackedVLLM)):
        c = TricdConfig.for_profile("small", overrides={"backbone": {"lm": lm, "d_model": 16, "n_heads": 2, "compound": False,
                                                                     "mimetic": False, "video_first": False}})
        model = make_backbone(c.bench, c.backbone).eval()
        assert type(model) is cls
        q, h, pad = ToyBackbone(model).forward(videos, enc, hidden=True)   # the router's input
        assert q.shape == (3, 5) and h.shape[:2] == pad.shape == (3, MAX_TEXT - 1 + model.n_visual + 1)
        q1 = ToyBackbone(model).forward(videos[:1], enc[:1, -(len(QS[0].split()) + 1):])[0]
        torch.testing.assert_close(q1, q[:1], atol=1e-5, rtol=1e-5)       # no dependence on padding
    with pytest.raises(ValueError):
        c = TricdConfig.for_profile("small", overrides={"backbone": {"lm": "rnn"}})
        make_backbone(c.bench, c.backbone)


def test_more_pretrain_qa_draws_fresh_items_from_the_programs_with_the_split_bias():
    import types

    from components.tricd import benchmark as B
    from components.tricd.backbone import more_pretrain_qa
    from components.tricd.config import TricdConfig

    bench = TricdConfig.for_profile("small").bench
    rng = np.random.default_rng(0)
    programs = [V.sample_scene(rng, 8, 24) for _ in range(60)]
    data = types.SimpleNamespace()
    more_pretrain_qa(data, programs, 50, 10, bench, 7)
    assert set(data.qa.task) == set(B.TASKS) and int(data.video_idx.max()) < 50
    assert len(data.qa) > 0.9 * 50 * 4 * 10 and len(data.text) == len(data.target) == len(data.qa)
    index = {w: i for i, w in enumerate(build_vocab())}
    assert data.target.tolist() == [index[a] for a in data.qa.answer]
    for it in data.qa.to_dict("records"):   # every answer re-derived from its program
        assert B.check_answer(programs[it["video"]], it) == it["answer"]
    yn = data.qa[data.qa.task.str.endswith("yn")]
    biased = yn.types.apply(lambda t: any(x in bench.biased_types for x in t))
    assert yn[biased].answer.eq("yes").mean() > 0.75                      # the disclosed prior is kept


def test_trimmed_training_batches_give_the_same_loss_for_pad_free_language_sides():
    from components.tricd.backbone import frozen_tower_loss

    tower = _tower(len(QS))
    target = torch.tensor([2, 3, 4])
    batch = (torch.arange(3), _texts(MAX_TEXT), target)
    for cls in (ReaderVLLM, PackedVLLM):
        torch.manual_seed(0)
        model = cls(len(build_vocab()), **KW).eval()
        wide = torch.nn.functional.cross_entropy(model(None, _texts(MAX_TEXT), tower=tower)[0], target)
        torch.testing.assert_close(frozen_tower_loss(model, batch, tower), wide, atol=1e-5, rtol=1e-5)
