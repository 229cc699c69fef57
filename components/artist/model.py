"""One policy, two roles (the paper's controller-reasoner with a shared backbone), tiny.

Tokens: [CTRL] [ANSWER] [family] [arg_1] [arg_2] then ``budget / patch`` patch tokens per view.
The arg tokens carry the geometry of the windows a question names, embedded like a view's.
A view token is a patch embedding (a small 1-D CNN over the view, mean- and max-pooled per
patch, plus an MLP on the raw patch; or that MLP alone) + its position inside the view + the view's window
geometry (start, end, width) + the round it was acquired in. A bidirectional transformer encoder
mixes them; the [CTRL] token's head scores the candidate windows and STOP, the [ANSWER] token's
head scores the options (options beyond the family's count are masked).
"""
from __future__ import annotations

import torch
from torch import nn

MAX_OPTIONS = 5
N_FAMILIES = 6
FOURIER_FREQS = (1.0, 2.0, 4.0, 8.0)   # cycles per series: halves/quarters (1, 2) to fine windows (8)


def geometry_features(geometry: torch.Tensor, kind: str) -> torch.Tensor:
    """(..., 3) relative (start, end, width) -> what the geometry embedding reads. ``fourier`` adds
    sin/cos of start and end at a few frequencies, so "which quarter / which fine window" is a
    linear read-out of one view's code; from the raw start alone, a quarter is a threshold that
    the attention-averaged code of several views blurs (the binding the localize answer needs)."""
    if kind == "linear":
        return geometry
    freqs = torch.tensor(FOURIER_FREQS, dtype=geometry.dtype, device=geometry.device)
    ang = 2 * torch.pi * geometry[..., :2, None] * freqs                 # (..., 2, F)
    return torch.cat([geometry, torch.sin(ang).flatten(-2), torch.cos(ang).flatten(-2)], dim=-1)


class ArtistPolicy(nn.Module):
    def __init__(self, n_actions: int, budget: int, max_views: int, d_model: int = 64, n_layers: int = 2,
                 n_heads: int = 4, patch: int = 16, dropout: float = 0.0, encoder: str = "cnn",
                 n_fine: int = 0, n_quarters: int = 0, geometry: str = "linear"):
        super().__init__()
        if budget % patch:
            raise ValueError(f"budget {budget} must be a multiple of patch {patch}")
        self.n_actions, self.budget, self.patch, self.max_views = n_actions, budget, patch, max_views
        self.n_patches = budget // patch
        self.special = nn.Parameter(torch.randn(2, d_model) * 0.02)      # [CTRL], [ANSWER]
        self.family = nn.Embedding(N_FAMILIES, d_model)
        self.arg_slot = nn.Parameter(torch.randn(2, d_model) * 0.02)
        self.encoder_kind = encoder
        if encoder == "mlp":
            self.patch_in = nn.Sequential(nn.Linear(patch, d_model), nn.GELU(), nn.Linear(d_model, d_model))
        elif encoder == "cnn":   # 1-D CNN over the view, mean+max pooled per patch, + raw-patch MLP
            self.conv = nn.Sequential(nn.Conv1d(1, 16, 5, padding=2), nn.GELU(),
                                      nn.Conv1d(16, 32, 5, padding=2), nn.GELU())
            self.patch_in = nn.Linear(64, d_model)
            self.patch_raw = nn.Sequential(nn.Linear(patch, d_model), nn.GELU(), nn.Linear(d_model, d_model))
        else:
            raise ValueError(f"unknown encoder {encoder!r} (cnn, mlp)")
        self.patch_pos = nn.Embedding(self.n_patches, d_model)
        if geometry not in ("linear", "fourier"):
            raise ValueError(f"unknown geometry {geometry!r} (linear, fourier)")
        self.geometry_kind = geometry
        n_geo = 3 if geometry == "linear" else 3 + 4 * len(FOURIER_FREQS)
        self.geometry = nn.Linear(n_geo, d_model)
        self.round = nn.Embedding(max_views, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.controller_head = nn.Linear(d_model, n_actions + 1)
        self.answer_head = nn.Linear(d_model, MAX_OPTIONS)
        # pointer head: each coarse-view token scores the candidate windows it covers, so "zoom
        # where the coarse view shows a bump" is one local, position-equivariant rule to learn
        self.pointer = None
        if n_fine and n_quarters and n_fine % self.n_patches == 0 and n_quarters % self.n_patches == 0:
            self.n_fine, self.n_quarters = n_fine, n_quarters
            self.pointer = nn.Linear(d_model, (n_fine + n_quarters) // self.n_patches)

    def forward(self, family: torch.Tensor, args: torch.Tensor, views: torch.Tensor, geometry: torch.Tensor,
                present: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """family (b,), args (b, 2, 3): the geometry of the windows a question names (zeros when it
        names none), views (b, V, budget), geometry (b, V, 3), present (b, V) bool.
        Returns controller logits (b, A + 1) and answer logits (b, MAX_OPTIONS), unmasked."""
        b, v, _ = views.shape
        tok = (self.embed_patches(views) + self.patch_pos.weight[None, None]
               + self.embed_geometry(geometry)[:, :, None] + self.round.weight[None, :v, None])
        tok = tok.reshape(b, v * self.n_patches, -1)
        head = torch.cat([self.special[None].expand(b, -1, -1),
                          self.family(family)[:, None],
                          self.embed_geometry(args) + self.arg_slot[None]], dim=1)
        x = torch.cat([head, tok], dim=1)
        pad = torch.cat([torch.zeros(b, head.shape[1], dtype=torch.bool, device=views.device),
                         (~present)[:, :, None].expand(b, v, self.n_patches).reshape(b, -1)], dim=1)
        h = self.norm(self.encoder(x, src_key_padding_mask=pad))
        ctrl = self.controller_head(h[:, 0])
        if self.pointer is not None:   # tokens of view 0 (the coarse view) follow the head tokens
            coarse = self.pointer(h[:, head.shape[1]:head.shape[1] + self.n_patches])   # (b, P, k)
            per = self.n_fine // self.n_patches
            point = torch.cat([coarse[:, :, :per].reshape(b, -1), coarse[:, :, per:].reshape(b, -1)], dim=1)
            ctrl = ctrl + torch.cat([point, torch.zeros_like(ctrl[:, -1:])], dim=1)
        return ctrl, self.answer_head(h[:, 1])

    def embed_geometry(self, geometry: torch.Tensor) -> torch.Tensor:
        return self.geometry(geometry_features(geometry, self.geometry_kind))

    def embed_patches(self, views: torch.Tensor) -> torch.Tensor:
        """(b, V, budget) -> (b, V, n_patches, d)."""
        b, v, n = views.shape
        if self.encoder_kind == "mlp":
            return self.patch_in(views.reshape(b, v, self.n_patches, self.patch))
        h = self.conv(views.reshape(b * v, 1, n))                       # (bv, 32, n)
        h = h.reshape(b * v, 32, self.n_patches, self.patch)
        pooled = torch.cat([h.mean(dim=-1), h.amax(dim=-1)], dim=1)      # (bv, 64, n_patches)
        raw = self.patch_raw(views.reshape(b, v, self.n_patches, self.patch))
        return self.patch_in(pooled.transpose(1, 2)).reshape(b, v, self.n_patches, -1) + raw


def mask_answers(logits: torch.Tensor, n_options: torch.Tensor) -> torch.Tensor:
    idx = torch.arange(logits.shape[-1], device=logits.device)
    return logits.masked_fill(idx[None] >= n_options[:, None], float("-inf"))


def mask_actions(logits: torch.Tensor, chosen: torch.Tensor, n_actions: int) -> torch.Tensor:
    """Forbid re-selecting a window already inspected. ``chosen`` (b, R) holds action ids or -1."""
    mask = torch.zeros_like(logits, dtype=torch.bool)
    valid = chosen >= 0
    rows = torch.arange(len(chosen), device=logits.device)[:, None].expand_as(chosen)
    mask[rows[valid], chosen[valid]] = True
    mask[:, n_actions] = False
    return logits.masked_fill(mask, float("-inf"))
