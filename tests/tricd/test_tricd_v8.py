"""v8 (issue 39): the language-side probe (``probe_lm``). Its perfect visual tokens carry the
answer of every object / attribute yes-no item, and its padding-masked forward is the toy's own
forward where a row has no padding, and ignores the padding where it has some."""
import json

import numpy as np
import torch

from components.tricd import benchmark as B
from components.tricd import video as V
from components.tricd.decode import MAX_TEXT
from components.tricd.model import ToyVLLM, build_vocab, encode
from components.tricd.probe_lm import masked_forward, oracle_states

torch.set_num_threads(1)


def _toy():
    torch.manual_seed(0)
    return ToyVLLM(len(build_vocab()), frames=8, size=32, patch=4, d_model=16, n_layers=2, n_heads=2,
                   max_text=MAX_TEXT, merge=4, tpatch=2, align=True, camera=True, feat_scale=0.0).eval()


def test_oracle_tokens_answer_object_and_attribute_items():
    rng = np.random.default_rng(0)
    programs = [V.sample_scene(rng, 8, 24) for _ in range(20)]
    model = _toy()
    _, g = oracle_states(programs, 32, model.token_px, model.tpatch, 16)
    n = 0
    for v, p in enumerate(programs):
        for kind in ("object", "attribute"):
            for want in (True, False):
                c = B.sample_clause(p, kind, want, rng)
                colour, shape = (c[1], c[2]) if kind == "object" else (c[2], c[1])
                seen = bool((g[v, ..., V.PAIRS.index((colour, shape))] > 0).any())
                assert seen == B.truth(p, c) == want
                n += 1
    assert n == 80


def test_masked_forward_matches_the_toy_without_padding_and_ignores_padding():
    model = _toy()
    index = {w: i for i, w in enumerate(build_vocab())}
    q = "is it true that there is a red circle ?"
    n = len(q.split()) + 1
    rng = np.random.default_rng(1)
    _, g = oracle_states([V.sample_scene(rng, 8, 24)], 32, model.token_px, model.tpatch, 16)
    tower = (torch.zeros(*g.shape[:3], 16), g)
    with torch.no_grad():
        tight = torch.tensor([encode(q, index, n)])
        padded = torch.tensor([encode(q, index, MAX_TEXT)])
        ref = model(None, tight, tower=tower)[0]
        torch.testing.assert_close(masked_forward(model, tight, tower), ref)
        torch.testing.assert_close(masked_forward(model, padded, tower), ref)   # positions count from the end
        assert not torch.allclose(model(None, padded, tower=tower)[0], ref)    # the toy attends to its pads
