"""The LLaVA-shaped model and the Visual Information Gain (VIG) score.

The model is transformers' ``LlavaForConditionalGeneration`` (CLIP vision tower -> MLP projector ->
Llama decoder), built tiny from its config classes by ``components.common.tiny_models``. The text
is stored without image placeholders; ``text_logits`` inserts one ``<image>`` id per visual token
after ``<bos>`` (as LLaVA's processor expands ``<image>``) and returns the logits that predict the
stored text tokens, so every score, mask and metric is indexed like the text alone.

VIG of a token = how many nats the real image saves over a blurred copy of it:
    d_t = -log p(a_t | a_<t, Q, blur(I)) - (-log p(a_t | a_<t, Q, I)).
Sample VIG = mean of d_t over the answer = log(PPL_blur / PPL_image).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from components.common.tiny_models import build_tiny


def build_model(model_cfg, vocab_size: int, image_size: int, seed: int = 0) -> torch.nn.Module:
    """A tiny randomly initialised LLaVA; the last vocabulary id is the ``<image>`` placeholder."""
    text = dict(vocab_size=vocab_size, hidden_size=model_cfg.d_model, intermediate_size=2 * model_cfg.d_model,
                num_hidden_layers=model_cfg.n_layers, num_attention_heads=model_cfg.n_heads,
                num_key_value_heads=model_cfg.n_kv_heads, max_position_embeddings=128,
                pad_token_id=0, bos_token_id=1, eos_token_id=3)
    vision = dict(image_size=image_size, patch_size=model_cfg.patch, hidden_size=model_cfg.d_vision,
                  intermediate_size=2 * model_cfg.d_vision, num_hidden_layers=model_cfg.vision_layers,
                  num_attention_heads=4, projection_dim=model_cfg.d_vision)
    return build_tiny("llava", seed=seed, text_config=text, vision_config=vision)


def n_image_tokens(model) -> int:
    """Visual tokens LLaVA feeds the decoder: one per patch (the CLS token is dropped)."""
    vision = model.config.vision_config
    return (vision.image_size // vision.patch_size) ** 2


def pixel_values(images: torch.Tensor) -> torch.Tensor:
    return images.float() / 127.5 - 1.0                    # uint8 -> [-1, 1]


def text_logits(model, images: torch.Tensor, tokens: torch.Tensor, image_at: int = 1) -> torch.Tensor:
    """Logits (B, T-1, vocab) predicting ``tokens[:, 1:]`` from the image and ``tokens[:, :-1]``.
    The visual tokens go after the first ``image_at`` text tokens: 1 (after ``<bos>``) on the small
    path; after LLaVA-1.5's system prompt and ``USER:`` on the paper path."""
    n = n_image_tokens(model)
    placeholders = torch.full((len(tokens), n), model.config.image_token_index, dtype=tokens.dtype,
                              device=tokens.device)
    input_ids = torch.cat([tokens[:, :image_at], placeholders, tokens[:, image_at:-1]], dim=1)
    logits = model(input_ids=input_ids, pixel_values=pixel_values(images)).logits
    # logits before the image predict tokens 1..image_at-1; those from the last visual token on
    # (position image_at + n - 1) predict tokens image_at.. : together, tokens[:, 1:]
    return torch.cat([logits[:, :image_at - 1], logits[:, image_at + n - 1:]], dim=1)


def token_nll(model, images: torch.Tensor, tokens: torch.Tensor, image_at: int = 1) -> torch.Tensor:
    """Per-position negative log-likelihood (B, T-1) of tokens[:, 1:]."""
    logits = text_logits(model, images, tokens, image_at).float()    # bf16 on the paper GPU: VIG is a small difference
    return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")


def weighted_lm_loss(model, images, tokens, weights, image_at: int = 1) -> torch.Tensor:
    """Mean NLL over the positions with weight 1 (labels that are not -100 in LLaVA terms)."""
    nll = token_nll(model, images, tokens, image_at)
    return (nll * weights).sum() / weights.sum().clamp_min(1.0)


@torch.no_grad()
def token_vig(model, images, blurred, tokens, batch_size: int = 512) -> tuple:
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
