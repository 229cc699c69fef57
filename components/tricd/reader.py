"""v9 (issue 39): language sides for the toy video LLM that never see padding.

``ReaderVLLM``: a VQA-style reader on the toy's vision tower and projector (same word-aligned
visual tokens, same positive-pathway hook, same ``forward`` signature and hidden-state layout
as ``ToyVLLM``). The question (words + ``<ans>``, left-padded) is encoded by a bidirectional
transformer (``CrossBlock`` with the question as its own keys and a key-padding mask), then for
``hops`` rounds the visual tokens read the question, the question reads the visual tokens and
the question mixes again; the answer logits are the head (tied to nothing, over the toy's whole
vocabulary, constrained to yes/no or A/B/C downstream) on the ``<ans>`` state. No position ever
attends to a pad, so a row's logits do not depend on how much padding its batch has.

``packed_forward``: the causal toy (``ToyVLLM``, question first) with every row's pads moved
behind its ``<ans>``: [words][visual tokens][<ans>][pads]. Causal attention then never reads a
pad and the answer is read at each row's own ``<ans>`` index; this is exactly the toy's forward
on the unpadded question (positions of the words still count from ``<ans>``).
"""
from __future__ import annotations

import torch
from torch import nn

from components.common.transformer import CrossBlock
from components.tricd.model import ToyVLLM


class ReaderVLLM(ToyVLLM):
    pad_free = True   # logits do not depend on left padding: training batches may be trimmed

    def __init__(self, *args, n_enc: int = 2, hops: int = 2, **kwargs):
        super().__init__(*args, **kwargs)
        d = self.tok_emb.embedding_dim
        heads = self.blocks[0].attn.n_heads if len(self.blocks) else 4
        self.blocks = nn.ModuleList()   # the causal stack is not used
        self.enc = nn.ModuleList(CrossBlock(d, heads) for _ in range(n_enc))
        self.vis_read = nn.ModuleList(CrossBlock(d, heads) for _ in range(hops))   # visual <- question
        self.txt_read = nn.ModuleList(CrossBlock(d, heads) for _ in range(hops))   # question <- visual
        self.txt_mix = nn.ModuleList(CrossBlock(d, heads) for _ in range(hops))    # question <- question
        self.ln_vis = nn.LayerNorm(d)
        # the inputs enter layer-normed: word embeddings (init std 0.02) and word-aligned visual
        # tokens are ~50x smaller than a CrossBlock's attention output, which would otherwise
        # overwrite them in the first residual update (the visual tokens then carry the question)
        self.ln_txt_in, self.ln_vis_in = nn.LayerNorm(d), nn.LayerNorm(d)
        # a learned "nothing here" key/value beside the visual tokens: softmax attention over the
        # visual tokens alone cannot say that nothing matches (its weights always sum to 1)
        self.null = nn.Parameter(torch.randn(1, 1, d))

    def forward(self, video, text, visual_weight=None, continuation=None, tower=None):
        """-> (logits at ``<ans>`` (B, vocab), hidden (B, L - 1 + T*P + 1, d) laid out as the
        causal toy's: [question words][visual tokens][<ans>])."""
        if continuation is not None:
            raise ValueError("the reader has no captioning head")
        vis = self.ln_vis_in(self.vision_tower(video) if tower is None else self.project(tower))
        if visual_weight is not None:   # after the norm: the positive pathway's weight is kept
            vis = vis * visual_weight.view(vis.shape[0], vis.shape[1], vis.shape[2], 1)
        vis = (vis + self.frame_pos + self.patch_pos).flatten(1, 2)
        pad = text == 0
        x = self.ln_txt_in(self.tok_emb(text) + self.text_pos[-text.shape[1]:])
        for block in self.enc:
            x = block(x, x, pad)
        for vr, tr, tm in zip(self.vis_read, self.txt_read, self.txt_mix):
            vis = vr(vis, x, pad)
            x = tr(x, torch.cat([self.null.expand(len(vis), -1, -1), vis], 1))
            x = tm(x, x, pad)
        h = self.ln_out(torch.cat([x[:, :-1], self.ln_vis(vis), x[:, -1:]], dim=1))
        return self.head(h[:, -1]), h


def packed_forward(model: ToyVLLM, text: torch.Tensor, tower=None, video=None,
                   visual_weight=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The causal toy with each row's pads after its ``<ans>``.
    -> (logits at each row's ``<ans>`` (B, vocab), hidden states in the toy's left-padded
    layout [question words][visual tokens][<ans>], or [visual tokens][question words][<ans>] with
    ``video_first`` (v11) (pad rows hold the pads' states))."""
    vis = model.vision_tower(video) if tower is None else model.project(tower)
    if visual_weight is not None:
        vis = vis * visual_weight.view(vis.shape[0], vis.shape[1], vis.shape[2], 1)
    vis = (vis + model.frame_pos + model.patch_pos).flatten(1, 2)
    txt = model.tok_emb(text) + model.text_pos[-text.shape[1]:]
    b, n_vis, d = vis.shape
    no_pad = torch.zeros(b, n_vis, dtype=torch.bool)
    if model.video_first:                                                # the toy's left-padded layouts
        x = torch.cat([vis, txt[:, :-1], txt[:, -1:]], dim=1)
        is_pad = torch.cat([no_pad, text[:, :-1] == 0, no_pad[:, :1]], 1)
    else:
        x = torch.cat([txt[:, :-1], vis, txt[:, -1:]], dim=1)
        is_pad = torch.cat([text[:, :-1] == 0, no_pad, no_pad[:, :1]], 1)
    # stable sort: real positions (in order) first, then the pads
    order = torch.sort(is_pad.to(torch.int8), dim=1, stable=True).indices  # (B, t)
    x = x.gather(1, order[..., None].expand(-1, -1, d))
    for block in model.blocks:
        x = block(x)
    h = model.ln_out(x)
    last = (~is_pad).sum(1) - 1                                          # each row's <ans> index
    logits = model.head(h[torch.arange(b), last])
    back = torch.empty_like(h).scatter_(1, order[..., None].expand(-1, -1, d), h)
    return logits, back


class PackedVLLM(ToyVLLM):
    """The causal toy whose forward is ``packed_forward`` (v9 option ``backbone.lm`` "packed")."""
    pad_free = True

    def forward(self, video, text, visual_weight=None, continuation=None, tower=None):
        if continuation is not None:
            raise ValueError("packed layout has no captioning path")
        return packed_forward(self, text, tower=tower, video=video, visual_weight=visual_weight)
