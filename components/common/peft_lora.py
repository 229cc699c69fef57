"""LoRA on transformers / diffusers models through peft: attach, save, load, merge.

(``components.common.lora`` is the hand-written LoRA that the embedded small profiles use on
plain ``nn.Linear`` toys; this module is the path for library models and peft adapter folders,
which is what paper checkpoints come with.)
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import torch

from components.common.hf_models import check_adapter

# Projections LoRA papers adapt by default in Llama/Qwen/Gemma-style decoders
DECODER_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
DECODER_ALL_LINEAR = DECODER_ATTENTION + ("gate_proj", "up_proj", "down_proj")


def attach_lora(model: torch.nn.Module, target_modules: Iterable[str] | str = DECODER_ATTENTION,
                rank: int = 8, alpha: float = 16.0, dropout: float = 0.0, task_type: str | None = None,
                adapter_name: str = "default"):
    """Wrap ``model`` in a ``PeftModel`` whose ``target_modules`` carry a trainable LoRA
    (B starts at zero, so outputs are unchanged until training). Only LoRA weights train."""
    from peft import LoraConfig, get_peft_model

    targets = target_modules if isinstance(target_modules, str) else list(target_modules)
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
                        task_type=task_type, bias="none")
    return get_peft_model(model, config, adapter_name=adapter_name)


def save_adapter(peft_model, folder: str | Path) -> Path:
    """Writes only the adapter (``adapter_config.json`` + ``adapter_model.safetensors``)."""
    folder = Path(folder)
    peft_model.save_pretrained(str(folder))
    return folder


def load_adapter(base_model: torch.nn.Module, folder: str | Path, trainable: bool = False,
                 adapter_name: str = "default"):
    """A saved adapter on top of ``base_model`` (which must be the model it was trained on)."""
    from peft import PeftModel

    check_adapter(folder)
    return PeftModel.from_pretrained(base_model, str(Path(folder).expanduser()), is_trainable=trainable,
                                     adapter_name=adapter_name)


def merge_lora(peft_model) -> torch.nn.Module:
    """Fold every LoRA update into its base weight and return the plain model (no peft left)."""
    return peft_model.merge_and_unload()


def lora_parameters(peft_model) -> dict[str, torch.Tensor]:
    return {n: p for n, p in peft_model.named_parameters() if "lora_" in n}
