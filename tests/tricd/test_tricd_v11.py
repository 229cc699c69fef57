"""v11 (issue 39): mimetic attention initialisation of the toy LM (Trockman & Kolter 2023).
Every head's W_q^T W_k starts near +I and W_v^T W_o near -I, so a token attends most to earlier
tokens that resemble it; off by default (v1-v10 init unchanged)."""
import json

import pytest
import torch
import torch.nn.functional as F

from components.common.transformer import MLP, Block
from components.tricd.backbone import make_backbone
from components.tricd.config import TricdConfig
from components.tricd.model import mimetic_init

torch.set_num_threads(1)


def _blocks(d=64, heads=4, seed=0):
    blocks = torch.nn.ModuleList([Block(d, heads, MLP(d, 4 * d)) for _ in range(2)])
    mimetic_init(blocks, torch.Generator().manual_seed(seed))
    return blocks


def test_products_are_near_plus_and_minus_identity():
    attn = _blocks()[0].attn
    d, dh = 64, 16
    wq, wk, wv = attn.qkv.weight.split(d, dim=0)
    for h in range(4):
        qk = wq[h * dh:(h + 1) * dh].T @ wk[h * dh:(h + 1) * dh]
        diag, off = qk.diagonal().mean(), (qk - torch.diag(qk.diagonal())).abs().mean()
        assert diag > 0.2 and diag > 3 * off                  # + identity dominates each head
    vo = wv.T @ attn.proj.weight.T
    assert vo.diagonal().mean() < -0.3                          # - identity
    assert torch.linalg.matrix_rank(vo) == d


def test_a_token_attends_most_to_its_earlier_copy():
    torch.manual_seed(1)
    attn = _blocks()[0].attn
    x = F.layer_norm(torch.randn(1, 8, 64), (64,))
    x[0, 7] = x[0, 2]                                           # position 7 repeats position 2
    q, k, _ = attn.qkv(x).split(64, dim=-1)
    q, k = (z.view(1, 8, 4, 16).transpose(1, 2) for z in (q, k))
    scores = (q[0, :, 7] [:, None] @ k[0].transpose(-1, -2)).squeeze(1).mean(0)   # (8,), heads averaged
    others = [i for i in range(7) if i != 2]
    assert scores[2] > scores[others].max() + 1.0


def test_mimetic_off_keeps_the_default_init_and_on_is_deterministic():
    cfg = TricdConfig.for_profile("smoke")
    assert cfg.backbone.mimetic                                  # v12 default
    bb = cfg.backbone.model_copy(update={"mimetic": False})
    torch.manual_seed(0)
    plain = make_backbone(cfg.bench, bb)
    torch.manual_seed(0)
    plain2 = make_backbone(cfg.bench, bb)
    assert torch.equal(plain.blocks[0].attn.qkv.weight, plain2.blocks[0].attn.qkv.weight)
    on = bb.model_copy(update={"mimetic": True})
    torch.manual_seed(0)
    a = make_backbone(cfg.bench, on)
    torch.manual_seed(123)
    b = make_backbone(cfg.bench, on)                            # own generator: global RNG irrelevant
    assert torch.equal(a.blocks[0].attn.qkv.weight, b.blocks[0].attn.qkv.weight)
    assert not torch.equal(a.blocks[0].attn.qkv.weight, plain.blocks[0].attn.qkv.weight)
    assert torch.equal(a.tok_emb.weight, plain.tok_emb.weight)   # only attention weights change


def test_reader_rejects_mimetic():
    cfg = TricdConfig.for_profile("smoke")
    with pytest.raises(ValueError, match="mimetic"):
        make_backbone(cfg.bench, cfg.backbone.model_copy(update={"mimetic": True, "lm": "reader"}))


def test_clause_targets_mark_each_clause_end_with_its_truth():
    """v12 probe: the clause-truth targets sit on each clause's last word; their conjunction is a
    yes/no item's answer and they re-derive a multiple-choice item's answer."""
    import numpy as np

    from components.tricd import benchmark as B
    from components.tricd import video as V
    from components.tricd.model import build_vocab, encode
    
    rng = np.random.default_rng(2)
    for compound in (False, True):
        index = {w: i for i, w in enumerate(build_vocab(compound))}
        for _ in range(60):
            p = V.sample_scene(rng, 8, 24)
            for task in B.TASKS:
                it = B.make_item(p, task, "pretrain", rng, bias=0.35, biased_types=["camera"], adversarial_rate=0.67)
                if it is None:
                    continue
                targets = B.clause_targets(it, p, index, 40, compound)
                ids = encode(it["question"], index, 40, compound)
                marked = [j for j, t in enumerate(targets) if t != -100]
                truths = [targets[j] == index["yes"] for j in marked]
                assert len(marked) == len(json.loads(it["clauses"]))
                assert all(ids[j + 1] in (index["and"], index["?"], index["<ans>"], *(index[L] for L in B.LETTERS))
                           for j in marked)                                 # a clause ends there
                if task.endswith("yn"):
                    assert (it["answer"] == "yes") == all(truths)
                elif not it["adversarial"]:
                    assert it["answer"] == B.LETTERS[truths.index(True)]


def test_clause_loss_reads_the_question_columns_and_needs_video_first():
    """v12 stage option: the clause-truth loss adds to the answer loss through the hidden states
    of the question's columns; the stage refuses it without the video-first packed layout."""
    from components.tricd.backbone import frozen_tower_loss, make_backbone, train_backbone_stage
    from components.tricd.model import build_vocab, encode

    cfg = TricdConfig.for_profile("smoke")
    bb = cfg.backbone.model_copy(update={"lm": "packed", "video_first": True, "compound": True})
    torch.manual_seed(0)
    model = make_backbone(cfg.bench, bb)
    index = {w: i for i, w in enumerate(build_vocab(True))}
    text = torch.tensor([encode("is it true that there is a red square ?", index, 40, True)] * 2)
    aux = torch.full_like(text, -100)
    aux[:, -2] = index["yes"]                                    # the clause's last word, before "?"
    d, n = model.tok_emb.embedding_dim, model.n_visual
    tower = (torch.zeros(2, model.token_frames, model.grid ** 2, d),
             torch.zeros(2, model.token_frames, model.grid ** 2, model.ground_head.out_features))
    batch = (torch.tensor([0, 1]), text, torch.tensor([index["yes"]] * 2), aux)
    plain = frozen_tower_loss(model, batch[:3], tower)
    with_aux = frozen_tower_loss(model, batch, tower, 1.0)
    assert with_aux > plain
    with_aux.backward()
    assert model.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    bad = cfg.model_copy(update={"backbone": cfg.backbone.model_copy(update={"aux_clause": 1.0, "video_first": False})})
    with pytest.raises(ValueError, match="aux_clause"):
        train_backbone_stage(bad, None)
