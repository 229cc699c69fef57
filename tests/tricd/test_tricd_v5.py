"""v5 (issue 39): the two-phase backbone pretraining (vision tower first, then frozen) and the
init scale of the router's tool-identity embedding."""
from types import SimpleNamespace

import numpy as np
import torch

from components.tricd import video as V
from components.tricd.decode import MAX_TEXT
from components.tricd.model import ToyVLLM, build_vocab

torch.set_num_threads(1)


def _toy(video_first: bool = False):
    torch.manual_seed(0)
    return ToyVLLM(len(build_vocab()), frames=8, size=16, patch=4, d_model=16, n_layers=1, n_heads=2,
                   max_text=MAX_TEXT, merge=2, tpatch=2, align=True, video_first=video_first).eval()


def test_a_cached_tower_state_gives_the_video_pass():
    """The QA phase reads cached tower states instead of running the tower: the logits must be the
    ones of the ordinary pass on the video (the word part of the projector is recomputed)."""
    model = _toy()
    video = torch.randint(0, 256, (3, 8, 16, 16, 3)).float()
    text = torch.randint(2, len(build_vocab()), (3, MAX_TEXT))
    with torch.no_grad():
        plain = model(video, text)[0]
        cached = model(None, text, tower=model.tower_state(video))[0]
    torch.testing.assert_close(cached, plain)


def test_pretrain_tower_trains_then_freezes_the_tower_only():
    from components.tricd.backbone import pretrain_tower

    model = _toy().train()
    videos = torch.randint(0, 256, (6, 8, 16, 16, 3), dtype=torch.uint8)
    labels = torch.zeros(6, 4, 4, len(V.PAIRS) + len(V.MOTIONS))
    labels[:, :, 0, 0] = 1.0
    scenes = torch.zeros(6, dtype=torch.long)
    tower_before = model.patch_embed.weight.clone()
    lm_before = model.tok_emb.weight.clone()
    bb = SimpleNamespace(tower_steps=5, tower_batch=3, lr=1e-2, weight_decay=0.0, warmup=0)
    feats, grounding = pretrain_tower(model, videos, labels, scenes, 6, bb, np.random.default_rng(0), None)
    assert not torch.equal(model.patch_embed.weight, tower_before)      # the tower learned ...
    torch.testing.assert_close(model.tok_emb.weight, lm_before)          # ... the LM did not move
    assert not any(p.requires_grad for p in model.patch_embed.parameters())
    assert all(p.requires_grad for p in model.blocks.parameters())
    with torch.no_grad():
        f, g = model.tower_state(videos)
    torch.testing.assert_close(feats, f)
    torch.testing.assert_close(grounding, g)


def test_tool_id_std_scales_the_v4_embedding():
    """``tool_id_std`` 1.0 is the v4 router exactly (same draws); other values scale it."""
    from components.tricd.policy import ToolRouter

    def router(std):
        torch.manual_seed(0)
        return ToolRouter(16, 16, 4, torch.randn(4, 3, 16), torch.zeros(4, 3, dtype=torch.bool), True, std)

    v4 = router(1.0).tool_id.weight
    torch.testing.assert_close(router(0.1).tool_id.weight, 0.1 * v4)
    torch.manual_seed(0)
    plain = ToolRouter(16, 16, 4, torch.randn(4, 3, 16), torch.zeros(4, 3, dtype=torch.bool), True)
    torch.testing.assert_close(plain.tool_id.weight, v4)


def test_video_first_layout_and_its_padding_mask():
    """``video_first``: [visual tokens][question words][<ans>]. Under causal attention the visual
    tokens then cannot read the question (their states do not depend on it), and the router's
    padding mask must mark the question's pad columns after the visual block."""
    from components.tricd.backbones import ToyBackbone

    model = _toy(video_first=True)
    video = torch.randint(0, 256, (2, 8, 16, 16, 3)).float()
    text = torch.zeros(2, MAX_TEXT, dtype=torch.long)
    text[:, -6:] = torch.randint(2, len(build_vocab()), (2, 6))
    other = text.clone()
    other[:, -6:-1] = torch.randint(2, len(build_vocab()), (2, 5))
    with torch.no_grad():
        q, h, pad = ToyBackbone(model).forward(video, text, hidden=True)
        _, h2, _ = ToyBackbone(model).forward(video, other, hidden=True)
    n = model.n_visual
    assert h.shape[1] == pad.shape[1] == n + MAX_TEXT
    torch.testing.assert_close(h[:, :n], h2[:, :n])
    assert not torch.allclose(h[:, -1], h2[:, -1])
    assert not pad[:, :n].any() and torch.equal(pad[:, n:-1], text[:, :-1] == 0) and not pad[:, -1].any()
