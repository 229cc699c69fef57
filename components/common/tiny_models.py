"""Tiny, randomly initialised models of the paper families, built from the libraries' own
config classes (the transformers/TRL test pattern).

The small profiles and the paper-shape tests use these so that a tiny model and the paper's
checkpoint go through the same classes and calls; only the config differs. Each family's
defaults keep the saved folder to a few MB; any config field can be overridden by keyword.

    model = build_tiny("qwen3", vocab_size=len(tokenizer))
"""
from __future__ import annotations

from typing import Any, Callable

import torch

# Shared tiny text-decoder shape: 2 layers, width 32, 4 query heads over 2 KV heads (GQA, as
# Llama-3/Qwen3/Gemma2 use), so attention code paths with grouped heads are exercised.
# Special ids follow components.common.tiny_tokenizer's order (pad 0, unk 1, bos 2, eos 3).
_DECODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256, vocab_size=512,
                pad_token_id=0, bos_token_id=2, eos_token_id=3)
_IMAGE = dict(image_size=32, patch_size=8, num_channels=3)


def _text_decoder(config_cls: str, model_cls: str, **extra: Any) -> Callable[..., torch.nn.Module]:
    def build(**overrides: Any):
        import transformers

        values = {**_DECODER, **extra, **overrides}
        config = getattr(transformers, config_cls)(**values)
        return getattr(transformers, model_cls)(config)
    return build


def _llava(**overrides: Any):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    text = overrides.pop("text_config", {})
    vision = overrides.pop("vision_config", {})
    vocab = text.get("vocab_size", _DECODER["vocab_size"])
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**{**_IMAGE, "hidden_size": 32, "intermediate_size": 64,
                                          "num_hidden_layers": 2, "num_attention_heads": 4,
                                          "projection_dim": 32, **vision}),
        text_config=LlamaConfig(**{**_DECODER, **text}),
        image_token_index=vocab - 1,          # LLaVA-1.5 reserves one id for <image>
        projector_hidden_act="gelu", vision_feature_layer=-2,
        vision_feature_select_strategy="default", **overrides)
    return LlavaForConditionalGeneration(config)


def _qwen2_vl(**overrides: Any):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    text = overrides.pop("text_config", {})
    vision = overrides.pop("vision_config", {})
    vocab = text.get("vocab_size", _DECODER["vocab_size"])
    head_dim = _DECODER["hidden_size"] // _DECODER["num_attention_heads"]   # 8: mrope halves sum to 4
    config = Qwen2VLConfig(
        text_config={**_DECODER, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                     "mrope_section": [1, 1, head_dim // 2 - 2]}, **text},
        vision_config={"depth": 2, "embed_dim": 32, "hidden_size": _DECODER["hidden_size"], "num_heads": 4,
                       "patch_size": 4, "spatial_merge_size": 2, "temporal_patch_size": 2, **vision},
        image_token_id=vocab - 1, video_token_id=vocab - 2, vision_start_token_id=vocab - 3,
        vision_end_token_id=vocab - 4, **overrides)
    return Qwen2VLForConditionalGeneration(config)


def _vit_mae(**overrides: Any):
    from transformers import ViTMAEConfig, ViTMAEForPreTraining

    config = ViTMAEConfig(**{**_IMAGE, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                             "num_attention_heads": 4, "decoder_hidden_size": 32, "decoder_num_hidden_layers": 1,
                             "decoder_num_attention_heads": 4, "decoder_intermediate_size": 64,
                             "mask_ratio": 0.75, **overrides})
    return ViTMAEForPreTraining(config)


def _clip_vision(**overrides: Any):
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(**{**_IMAGE, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "projection_dim": 32, **overrides})
    return CLIPVisionModel(config)


def _clip(**overrides: Any):
    """Both towers and the projections (retrieval over text and images); the text tower's
    special ids follow the tiny tokenizer. Override ``text_config``/``vision_config`` as dicts."""
    from transformers import CLIPConfig, CLIPModel

    text = {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 77, "pad_token_id": 0,
            "bos_token_id": 2, "eos_token_id": 3, **overrides.pop("text_config", {})}
    vision = {**_IMAGE, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, **overrides.pop("vision_config", {})}
    return CLIPModel(CLIPConfig(text_config=text, vision_config=vision, **{"projection_dim": 16, **overrides}))


def _dinov2(**overrides: Any):
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(**{"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 32, "image_size": 32, "patch_size": 8, **overrides})
    return Dinov2Model(config)


def _resnet(**overrides: Any):
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(**{"num_channels": 3, "embedding_size": 16, "hidden_sizes": [16, 32],
                             "depths": [1, 1], "layer_type": "basic", "num_labels": 10, **overrides})
    return ResNetForImageClassification(config)


def _esm(**overrides: Any):
    from transformers import EsmConfig, EsmForMaskedLM

    # 33 = ESM-2's vocabulary (20 amino acids + specials); ids follow the published vocab order
    config = EsmConfig(**{"vocab_size": 33, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "max_position_embeddings": 130, "pad_token_id": 1,
                          "mask_token_id": 32, "position_embedding_type": "rotary",
                          "emb_layer_norm_before": False, "token_dropout": True, **overrides})
    return EsmForMaskedLM(config)


def _unet2d(**overrides: Any):
    from diffusers import UNet2DModel

    return UNet2DModel(**{"sample_size": 16, "in_channels": 3, "out_channels": 3, "layers_per_block": 1,
                          "block_out_channels": (16, 32), "norm_num_groups": 8,
                          "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
                          "up_block_types": ("AttnUpBlock2D", "UpBlock2D"), **overrides})


def _vae(**overrides: Any):
    from diffusers import AutoencoderKL

    return AutoencoderKL(**{"in_channels": 3, "out_channels": 3, "latent_channels": 4, "sample_size": 32,
                            "block_out_channels": (16, 32), "layers_per_block": 1, "norm_num_groups": 8,
                            "down_block_types": ("DownEncoderBlock2D", "DownEncoderBlock2D"),
                            "up_block_types": ("UpDecoderBlock2D", "UpDecoderBlock2D"), **overrides})


# family -> (builder, load kind for components.common.hf_models.load_model)
FAMILIES: dict[str, tuple[Callable[..., torch.nn.Module], str]] = {
    "qwen3": (_text_decoder("Qwen3Config", "Qwen3ForCausalLM", head_dim=8), "causal_lm"),
    "gemma2": (_text_decoder("Gemma2Config", "Gemma2ForCausalLM", head_dim=8, sliding_window=64), "causal_lm"),
    "llama": (_text_decoder("LlamaConfig", "LlamaForCausalLM"), "causal_lm"),
    "llava": (_llava, "vlm"),
    "qwen2_vl": (_qwen2_vl, "vlm"),
    "vit_mae": (_vit_mae, "pretraining"),
    "clip_vision": (_clip_vision, "encoder"),
    "clip": (_clip, "encoder"),
    "dinov2": (_dinov2, "encoder"),
    "resnet": (_resnet, "image_classification"),
    "esm": (_esm, "masked_lm"),
    "unet2d": (_unet2d, "diffusers"),
    "vae": (_vae, "diffusers"),
}


def build_tiny(family: str, seed: int = 0, **overrides: Any) -> torch.nn.Module:
    """A freshly initialised tiny model of ``family`` (same seed -> same weights), eval mode."""
    if family not in FAMILIES:
        raise KeyError(f"unknown tiny family {family!r}; choose one of {', '.join(FAMILIES)}")
    torch.manual_seed(seed)
    return FAMILIES[family][0](**overrides).eval()


def load_kind(family: str) -> str:
    return FAMILIES[family][1]
