"""Load and save transformers / diffusers models from local folders (never from a hub).

A paper profile points a ``paper.*`` key at a folder written by ``save_pretrained``; the small
profile and the tests build the same class from its config (``components.common.tiny_models``)
and save it the same way, so both go through ``load_model``.

Kinds (what the stage wants to do with the model, mapped to transformers' Auto classes):
``causal_lm``, ``vlm`` (image-text-to-text), ``masked_lm``, ``pretraining`` (e.g. ViT-MAE),
``image_classification`` (e.g. ResNet), ``encoder`` (the bare model: CLIP vision, ViT, ESM).
A diffusers folder (its config names ``_class_name``) loads as that diffusers class.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from components.common.devices import AUTO, resolve_device, resolve_dtype

AUTO_CLASSES = {
    "causal_lm": "AutoModelForCausalLM",
    "vlm": "AutoModelForImageTextToText",
    "masked_lm": "AutoModelForMaskedLM",
    "pretraining": "AutoModelForPreTraining",
    "image_classification": "AutoModelForImageClassification",
    "encoder": "AutoModel",
}
# weight files transformers / diffusers write (single file, sharded index, or legacy .bin)
TRANSFORMERS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                        "pytorch_model.bin.index.json")
DIFFUSERS_WEIGHTS = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.safetensors.index.json",
                     "diffusion_pytorch_model.bin")
PEFT_FILES = ("adapter_config.json",)
PEFT_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class CheckpointError(FileNotFoundError):
    """A folder that is not a loadable checkpoint; the message names what is missing."""


def read_config(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder).expanduser()
    path = folder / "config.json"
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder (expected a save_pretrained checkpoint folder)")
    if not path.is_file():
        raise CheckpointError(f"{folder}: missing config.json (expected a save_pretrained checkpoint folder)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None


def library_of(config: dict[str, Any]) -> str:
    return "diffusers" if "_class_name" in config else "transformers"


def check_checkpoint(folder: str | Path) -> str:
    """Validate a model folder; returns ``"transformers"`` or ``"diffusers"``. Raises
    ``CheckpointError`` naming the missing file (config or weights)."""
    folder = Path(folder).expanduser()
    config = read_config(folder)
    library = library_of(config)
    weights = DIFFUSERS_WEIGHTS if library == "diffusers" else TRANSFORMERS_WEIGHTS
    _need_one_of(folder, weights, f"{library} weights")
    if library == "transformers" and "model_type" not in config:
        raise CheckpointError(f"{folder / 'config.json'}: no 'model_type' field (not a transformers config)")
    return library


def check_adapter(folder: str | Path) -> None:
    folder = Path(folder).expanduser()
    _need_one_of(folder, PEFT_FILES, "peft adapter config")
    _need_one_of(folder, PEFT_WEIGHTS, "peft adapter weights")


def check_tokenizer(folder: str | Path) -> None:
    _need_one_of(Path(folder).expanduser(), TOKENIZER_FILES, "tokenizer files")


def _need_one_of(folder: Path, names: tuple[str, ...], what: str) -> None:
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder (expected {what}: {' or '.join(names)})")
    if not any((folder / name).is_file() for name in names):
        raise CheckpointError(f"{folder}: missing {names[0]} ({what}; any of {', '.join(names)})")


def load_model(folder: str | Path, kind: str = "causal_lm", device: str = AUTO, dtype: str = AUTO,
               **kwargs: Any) -> torch.nn.Module:
    """A model from a local folder on the policy's device and dtype (see ``devices``), in eval
    mode. ``kind`` picks the transformers head; diffusers folders ignore it."""
    folder = Path(folder).expanduser()
    library = check_checkpoint(folder)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dev, dtype)
    if library == "diffusers":
        import diffusers

        cls = getattr(diffusers, read_config(folder)["_class_name"])
        model = cls.from_pretrained(str(folder), torch_dtype=torch_dtype, **kwargs)
    else:
        import transformers

        if kind not in AUTO_CLASSES:
            raise ValueError(f"unknown model kind {kind!r}; choose one of {', '.join(AUTO_CLASSES)}")
        auto = getattr(transformers, AUTO_CLASSES[kind])
        model = auto.from_pretrained(str(folder), dtype=torch_dtype, local_files_only=True, **kwargs)
    return model.to(dev).eval()


def load_tokenizer(folder: str | Path, padding_side: str | None = None):
    """The tokenizer (or multimodal processor's tokenizer) saved beside a model."""
    from transformers import AutoTokenizer

    folder = Path(folder).expanduser()
    check_tokenizer(folder)
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    if padding_side:
        tok.padding_side = padding_side
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token      # batched generation and training need a pad id
    return tok


def save_model(model: torch.nn.Module, folder: str | Path, tokenizer: Any = None) -> Path:
    """``save_pretrained`` (safetensors) of the model and, if given, its tokenizer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
