"""v10 (issue 39): compound colour-shape words. The toy tokenizer merges each adjacent
"<colour> <shape>" into one id and back again; the projector adds the embedding of the SAME id for
the pair a visual token holds; off by default (v1-v9 vocabulary and encoding unchanged)."""
import numpy as np
import torch

from components.tricd import benchmark as B
from components.tricd import video as V
from components.tricd.decode import MAX_TEXT
from components.tricd.model import (COMPOUNDS, ToyVLLM, build_vocab, detokenize, encode, split_grounding,
                                    tokenize)
from components.tricd.probe_lm import oracle_states

torch.set_num_threads(1)
KW = dict(frames=8, size=32, patch=4, d_model=16, n_layers=1, n_heads=2, max_text=MAX_TEXT, merge=4,
          tpatch=2, align=True, camera=True, feat_scale=0.0)


def _questions(n=40):
    rng = np.random.default_rng(5)
    out = []
    for _ in range(n):
        p = V.sample_scene(rng, 8, 24)
        for task in B.TASKS:
            it = B.make_item(p, task, "val", rng, bias=0.35, biased_types=["camera"], adversarial_rate=0.67)
            if it is not None:
                out.append(it["question"])
    return out


def test_tokenizer_merge_round_trips_and_merges_every_adjacent_colour_shape():
    qs = _questions()
    assert any("red" in q for q in qs)
    for q in qs:
        toks = tokenize(q, compound=True)
        assert detokenize(toks) == q                          # lossless
        assert tokenize(q) == q.split()                        # default: plain words (v1-v9)
        for a, b in zip(toks, toks[1:]):                       # nothing left to merge
            assert not (a in V.COLORS and b in V.SHAPES)
        n_pairs = sum(a in V.COLORS and b in V.SHAPES for a, b in zip(q.split(), q.split()[1:]))
        assert sum(t in COMPOUNDS for t in toks) == n_pairs
    assert tokenize("the red circle is left of the blue square ?", True) == \
        ["the", "red_circle", "is", "left", "of", "the", "blue_square", "?"]
    assert tokenize("the circle is red", True) == ["the", "circle", "is", "red"]   # not adjacent: kept


def test_compound_vocabulary_appends_ids_and_default_encoding_is_unchanged():
    base, comp = build_vocab(), build_vocab(True)
    assert comp[:len(base)] == base and comp[len(base):] == list(COMPOUNDS)
    bi, ci = ({w: i for i, w in enumerate(v)} for v in (base, comp))
    for q in _questions(10):
        assert encode(q, bi, MAX_TEXT) == encode(q, ci, MAX_TEXT)   # same ids without the merge
        enc = encode(q, ci, MAX_TEXT, compound=True)
        words = [comp[i] for i in enc if i != 0][:-1]
        assert detokenize(words) == q


def test_compound_ids_are_shared_by_text_and_visual_side():
    torch.manual_seed(0)
    comp = build_vocab(True)
    index = {w: i for i, w in enumerate(comp)}
    model = ToyVLLM(len(comp), compound=True, **KW).eval()
    # the projector's id of every pair is the id the tokenizer gives "<colour> <shape>"
    for k, (c, s) in enumerate(V.PAIRS):
        assert int(model.pair_compound[k]) == encode(f"{c} {s}", index, 3, compound=True)[-2]
    # on perfect tokens, a token holding exactly one pair carries that compound's embedding
    rng = np.random.default_rng(2)
    progs = [V.sample_scene(rng, 8, 24) for _ in range(4)]
    tower = oracle_states(progs, 32, model.token_px, model.tpatch, 16)
    plain = ToyVLLM(len(comp), compound=True, **KW).eval()
    plain.load_state_dict(model.state_dict())
    plain.compound = False                                     # same weights, no compound term
    with torch.no_grad():
        diff = model.project(tower) - plain.project(tower)    # (B, T', P, d)
        pairs = torch.sigmoid(split_grounding(tower[1])[0])
        want = pairs @ model.tok_emb(model.pair_compound)
        torch.testing.assert_close(diff, want)
        b, t, p = (pairs > 0.5).sum(-1).eq(1).nonzero()[0].tolist()
        k = int(pairs[b, t, p].argmax())
        e = model.tok_emb.weight[model.pair_compound[k]]
        torch.testing.assert_close(diff[b, t, p], e, atol=1e-3, rtol=1e-3)


def test_compound_option_reaches_backbone_and_its_encoder():
    from components.tricd.backbone import make_backbone
    from components.tricd.backbones import ToyBackbone
    from components.tricd.config import TricdConfig

    cfg = TricdConfig.for_profile("small", overrides={"backbone": {"compound": False}})
    assert not make_backbone(cfg.bench, cfg.backbone).compound   # v1-v9
    assert TricdConfig.for_profile("small").backbone.compound    # v12 default
    cfg = TricdConfig.for_profile("small", overrides={"backbone": {"compound": True, "d_model": 16}})
    model = make_backbone(cfg.bench, cfg.backbone)
    assert model.compound and model.tok_emb.num_embeddings == len(build_vocab(True))
    bb = ToyBackbone(model.eval())
    import pandas as pd
    enc = bb.encode(pd.DataFrame({"question": ["is it true that there is a red circle ?"]}))
    assert int(enc[0, -2]) == build_vocab(True).index("?") and int(enc[0, -3]) == build_vocab(True).index("red_circle")
    emb, pad = bb.describe(["add random noise to every frame", "the red circle"])
    assert emb.shape[:2] == pad.shape == (2, 6) and pad[1].sum() == 4   # "the red_circle": 2 tokens
