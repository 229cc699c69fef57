"""peft LoRA on a tiny Qwen3: attach leaves outputs unchanged, merge equals the adapted
forward, a saved adapter reloads onto a fresh base with the same outputs."""
import pytest
import torch

from components.common.hf_models import CheckpointError
from components.common.peft_lora import attach_lora, load_adapter, lora_parameters, merge_lora, save_adapter
from components.common.tiny_models import build_tiny

IDS = torch.tensor([[5, 9, 17, 3, 11, 2]])


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


def _adapted(seed: int = 1):
    model = attach_lora(build_tiny("qwen3"), rank=4, alpha=8)
    torch.manual_seed(seed)
    with torch.no_grad():                          # as if trained: B != 0
        for name, p in lora_parameters(model).items():
            if "lora_B" in name:
                p.normal_(std=0.5)
    return model


def test_attach_starts_at_the_base_and_trains_only_lora():
    base = _logits(build_tiny("qwen3"))
    model = attach_lora(build_tiny("qwen3"), rank=4)
    assert torch.allclose(_logits(model), base, atol=1e-6)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


def test_merge_equals_the_adapted_forward():
    model = _adapted()
    adapted = _logits(model)
    assert not torch.allclose(adapted, _logits(build_tiny("qwen3")), atol=1e-3)   # the adapter matters
    merged = merge_lora(model)
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    assert torch.allclose(_logits(merged), adapted, atol=1e-5)


def test_adapter_round_trip(tmp_path):
    model = _adapted()
    folder = save_adapter(model, tmp_path / "adapter")
    assert (folder / "adapter_config.json").is_file()
    reloaded = load_adapter(build_tiny("qwen3"), folder)
    assert torch.allclose(_logits(reloaded), _logits(model), atol=1e-6)
    (folder / "adapter_model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="adapter_model.safetensors"):
        load_adapter(build_tiny("qwen3"), folder)
