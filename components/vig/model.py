"""A tiny LLaVA-shaped model and the Visual Information Gain (VIG) score.

Vision: a patch-conv encoder; projector: one linear layer into the LM width; LM: the shared
nanoGPT decoder (components.common.transformer). The image patches are a prefix of the token
sequence, exactly as LLaVA feeds projected CLIP features to the LLM.

VIG of a token = how many nats the real image saves over a blurred copy of it:
    d_t = -log p(a_t | a_<t, Q, blur(I)) - (-log p(a_t | a_<t, Q, I)).
Sample VIG = mean of d_t over the answer = log(PPL_blur / PPL_image).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from components.common.transformer import MLP, Decoder, DecoderShape


class TinyVLM(nn.Module):
    def __init__(self, vocab_size: int, image_size: int, seq_len: int, patch: int = 4,
                 d_vision: int = 32, d_model: int = 64, n_layers: int = 2, n_heads: int = 4):
        super().__init__()
        self.n_patches = (image_size // patch) ** 2
        self.encoder = nn.Sequential(nn.Conv2d(3, d_vision, patch, stride=patch), nn.GELU(),
                                     nn.Conv2d(d_vision, d_vision, 1))
        self.projector = nn.Linear(d_vision, d_model)
        shape = DecoderShape(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers,
                             n_heads=n_heads, context=self.n_patches + seq_len)
        self.lm = Decoder(shape, lambda _: MLP(d_model, 4 * d_model))

    def visual_tokens(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() / 127.5 - 1.0                      # uint8 -> [-1, 1]
        feats = self.encoder(x).flatten(2).transpose(1, 2)    # (B, patches, d_vision)
        return self.projector(feats)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, T-1, vocab) predicting ``tokens[:, 1:]`` from image prefix + tokens[:, :-1]."""
        lm = self.lm
        x = torch.cat([self.visual_tokens(images), lm.tok_emb(tokens[:, :-1])], dim=1)
        x = x + lm.pos_emb(torch.arange(x.shape[1], device=x.device))
        for block in lm.blocks:
            x = block(x)
        return lm.head(lm.ln_out(x[:, self.n_patches:]))


def build_model(model_cfg, vocab_size: int, image_size: int, seq_len: int) -> TinyVLM:
    return TinyVLM(vocab_size, image_size, seq_len, patch=model_cfg.patch,
                   d_vision=model_cfg.d_vision, d_model=model_cfg.d_model,
                   n_layers=model_cfg.n_layers, n_heads=model_cfg.n_heads)


def token_nll(model: TinyVLM, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Per-position negative log-likelihood (B, T-1) of tokens[:, 1:]."""
    logits = model(images, tokens)
    return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")


def weighted_lm_loss(model: TinyVLM, images, tokens, weights) -> torch.Tensor:
    """Mean NLL over the positions with weight 1 (labels that are not -100 in LLaVA terms)."""
    nll = token_nll(model, images, tokens)
    return (nll * weights).sum() / weights.sum().clamp_min(1.0)


@torch.no_grad()
def token_vig(model: TinyVLM, images, blurred, tokens, batch_size: int = 512) -> tuple:
    """(l_img, l_blur, d) per target position, each (N, T-1); d = l_blur - l_img."""
    model.eval()
    l_img, l_blur = [], []
    for s in range(0, len(tokens), batch_size):
        sl = slice(s, s + batch_size)
        l_img.append(token_nll(model, images[sl], tokens[sl]))
        l_blur.append(token_nll(model, blurred[sl], tokens[sl]))
    l_img, l_blur = torch.cat(l_img), torch.cat(l_blur)
    return l_img, l_blur, l_blur - l_img


def sample_vig(d: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean token VIG over the answer positions = log(PPL_blur / PPL_image)."""
    mask = mask.float()
    return (d * mask).sum(1) / mask.sum(1).clamp_min(1.0)


def vig_from_token_probs(p_blur, p_img) -> float:
    """VIG of one answer from the probabilities each condition gives its tokens."""
    p_blur, p_img = torch.as_tensor(p_blur, dtype=torch.float64), torch.as_tensor(p_img, dtype=torch.float64)
    return float((p_img.log() - p_blur.log()).mean())
