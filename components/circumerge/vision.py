"""The paper profile's backbone and tasks: a CLIP vision encoder with peft LoRA adapters on the
8-task image benchmark (KnOTS / Core Space protocol), run through the same stages as MiniLM.

- ``ClipFeatures``: a transformers ``CLIPVisionModel`` loaded from a local folder, returning
  L2-normalised pooled features, so the frozen task heads and ``accuracy`` work unchanged.
- ``ImageSplit``: a split's images as paths, decoded batch by batch when indexed (the 8 tasks
  hold ~200k images, too many to keep as tensors), looking like the tensor ``x`` of a small split.
- Heads: only the vision tower is given, so each task's frozen head is the class prototypes
  (mean normalised feature of the pre-trained encoder over a few train images per class), a
  stand-in for CLIP's zero-shot text heads (CLAIMS.md).
- Adapters: trained here with peft, or loaded from peft adapter folders (e.g. KnOTS'); either
  way they are read back as effective factors ``(scale * B, A)`` per adapted linear.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from components.common.devices import resolve_device, resolve_dtype
from components.common.hf_models import load_model, read_config
from components.common.io import save_torch, write_table
from components.common.readers import image_folder, load_image

# OpenAI CLIP's pixel statistics (its CLIPImageProcessor); a preprocessor_config.json beside the
# checkpoint overrides them
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
SPLIT_FOLDERS = ("train", "val", "test")
IMAGE_LAYOUT = "<task>/{train,test}[/val]/<class>/<image>"


class ImageSplit:
    """Images of one split, decoded (resized, normalised) only for the rows asked for."""

    def __init__(self, paths: list[str], image: dict):
        self.paths, self.image = list(paths), image

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, idx) -> torch.Tensor:
        rows = range(len(self.paths))[idx] if isinstance(idx, slice) else torch.as_tensor(idx).reshape(-1).tolist()
        return torch.stack([load_image(self.paths[i], self.image["size"], self.image["mean"],
                                       self.image["std"]) for i in rows])


class ClipFeatures(nn.Module):
    """``x -> normalize(CLIPVisionModel(x).pooler_output)``; inputs go to the model's device and
    dtype, features come back as float32 on the CPU where the heads live."""

    def __init__(self, clip: nn.Module):
        super().__init__()
        self.clip = clip

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        ref = next(self.clip.parameters())
        pooled = self.clip(pixel_values=x.to(ref.device, ref.dtype)).pooler_output
        return F.normalize(pooled.float(), dim=-1).cpu()


def load_clip(spec: dict) -> ClipFeatures:
    """The frozen encoder of ``prepare_tasks``' spec on the policy's device (bf16 on GPU). A full
    CLIP checkpoint (model_type ``clip``, as on the hub) gives its vision tower."""
    device = resolve_device(spec["device"])
    dtype = spec.get("dtype", "auto")
    if read_config(spec["folder"]).get("model_type") == "clip":
        from transformers import CLIPVisionModel

        clip = CLIPVisionModel.from_pretrained(spec["folder"], dtype=resolve_dtype(device, dtype),
                                               local_files_only=True).to(device)
    else:
        clip = load_model(spec["folder"], "encoder", device=str(device), dtype=dtype)
    if type(clip).__name__ != "CLIPVisionModel":
        raise ValueError(f"{spec['folder']}: loads as {type(clip).__name__}, expected CLIPVisionModel "
                         "(model_type 'clip_vision_model' or 'clip')")
    return ClipFeatures(clip).requires_grad_(False).eval()


def image_spec(folder: str | Path) -> dict:
    """Input size from the model config; mean/std from a saved image processor, else CLIP's."""
    folder = Path(folder).expanduser()
    config = read_config(folder)
    config = config.get("vision_config", config) if config.get("model_type") == "clip" else config
    processor = folder / "preprocessor_config.json"
    stats = json.loads(processor.read_text()) if processor.is_file() else {}
    return {"size": int(config.get("image_size", 224)), "mean": tuple(stats.get("image_mean", CLIP_MEAN)),
            "std": tuple(stats.get("image_std", CLIP_STD))}


# ----------------------------------------------------------------------------- task splits
def _subsample(records: list, cap: int | None, rng: np.random.Generator) -> list:
    if cap is None or len(records) <= cap:
        return records
    return [records[i] for i in sorted(rng.choice(len(records), size=cap, replace=False))]


def task_splits(root: Path, task: str, paper, rng: np.random.Generator) -> tuple[dict, list[str]]:
    """``{split: (paths, labels)}`` and the class names of ``root/<task>``. Without a ``val``
    folder, ``paper.val_size`` train images are held out for the alpha search."""
    train, classes = image_folder(str(root / task / "train"))
    test, test_classes = image_folder(str(root / task / "test"))
    if test_classes != classes:
        raise ValueError(f"{root / task}: test classes differ from train classes")
    if (root / task / "val").is_dir():
        val, val_classes = image_folder(str(root / task / "val"))
        if val_classes != classes:
            raise ValueError(f"{root / task}: val classes differ from train classes")
    else:
        order = rng.permutation(len(train))
        held = set(order[:min(paper.val_size, len(train) // 2)].tolist())
        val = [r for i, r in enumerate(train) if i in held]
        train = [r for i, r in enumerate(train) if i not in held]
    caps = {"train": paper.max_train, "val": paper.max_val, "test": paper.max_test}
    out = {}
    for split, records in zip(SPLIT_FOLDERS, (train, val, test)):
        records = _subsample(records, caps[split], rng)
        out[split] = ([r.path for r in records], [r.label for r in records])
    return out, classes


@torch.inference_mode()
def prototype_head(net: ClipFeatures, split: ImageSplit, labels: list[int], n_classes: int,
                   shots: int, scale: float, rng: np.random.Generator) -> dict:
    """Frozen head: the mean normalised feature of up to ``shots`` train images per class."""
    labels_arr = np.asarray(labels)
    weight = []
    for c in range(n_classes):
        rows = np.flatnonzero(labels_arr == c)
        if len(rows) == 0:
            raise ValueError(f"class {c} has no train image left (raise paper.max_train or paper.val_size)")
        rows = rng.choice(rows, size=min(shots, len(rows)), replace=False)
        feats = torch.cat([net(split[torch.as_tensor(rows[i:i + 64])]) for i in range(0, len(rows), 64)])
        weight.append(F.normalize(feats.mean(0), dim=-1))
    return {"weight": torch.stack(weight), "bias": torch.zeros(n_classes), "scale": float(scale)}


def prepare_clip_tasks(data, model, paper, out_dir: Path) -> dict[str, int]:
    """Task records (image paths, labels, prototype head) and the backbone spec; returns the
    image counts ``n_train`` (all tasks) and ``n_images/<task>/<split>``."""
    spec = {"folder": str(Path(paper.vision_model).expanduser()), "device": paper.device,
            "dtype": paper.dtype, "image": image_spec(paper.vision_model)}
    net = load_clip(spec)
    rng = np.random.default_rng(data.data_seed)
    rows = {"task": [], "split": [], "path": [], "label": []}
    counts = {}
    for task in data.tasks:
        splits, classes = task_splits(Path(paper.data_root).expanduser(), task, paper, rng)
        record = {split: {"paths": paths, "y": torch.as_tensor(labels), "mask": None}
                  for split, (paths, labels) in splits.items()}
        record["image"], record["classes"] = spec["image"], classes
        train = ImageSplit(record["train"]["paths"], spec["image"])
        record["head"] = prototype_head(net, train, splits["train"][1], len(classes), paper.head_shots,
                                        model.head_scale, rng)
        save_torch(out_dir / "tasks" / f"{task}.pt", record)
        for split, (paths, labels) in splits.items():
            rows["task"] += [task] * len(paths)
            rows["split"] += [split] * len(paths)
            rows["path"] += paths
            rows["label"] += labels
            counts[f"n_images/{task}/{split}"] = len(paths)
    write_table(out_dir / "images.parquet", rows)
    save_torch(out_dir / "backbone.pt", {"kind": "clip", "spec": spec})
    return {"n_train": sum(v for k, v in counts.items() if k.endswith("/train"))} | counts


def as_image_splits(record: dict) -> dict:
    """A saved CLIP task record with each split's paths behind an ``ImageSplit`` as ``x``."""
    if "image" not in record:
        return record
    for split in SPLIT_FOLDERS:
        record[split] = {**record[split], "x": ImageSplit(record[split]["paths"], record["image"])}
    return record


# ----------------------------------------------------------------------------- peft adapters
PEFT_PREFIX = "base_model.model."


def attach_peft(net: ClipFeatures, targets: list[str], rank: int, alpha: float) -> ClipFeatures:
    from components.common.peft_lora import attach_lora

    net.clip = attach_lora(net.clip, targets, rank=rank, alpha=alpha)
    return net


def load_peft(net: ClipFeatures, folder: Path) -> ClipFeatures:
    """A peft adapter folder on the encoder. Adapters saved before transformers 5 (KnOTS') name
    the tower ``vision_model.``; transformers 5's CLIPVisionModel has no such level, so when no
    key matched, the keys are read again without it (a full-CLIP adapter's text keys dropped)."""
    from components.common.peft_lora import load_adapter

    net.clip = load_adapter(net.clip, folder)
    if _all_zero(net):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(net.clip, _tower_level_removed(folder))
    if _all_zero(net):   # peft leaves every B at its zero init when nothing matched
        raise ValueError(f"{folder}: the adapter's weights matched no layer of the CLIP encoder "
                         "(all LoRA B factors are zero); was it trained on this model?")
    return net


def _all_zero(net: ClipFeatures) -> bool:
    return all(float(b.abs().sum()) == 0 for b, _ in peft_factors(net).values())


def _tower_level_removed(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state = load_file(str(Path(folder) / "adapter_model.safetensors"))
    return {key.replace(f"{PEFT_PREFIX}vision_model.", PEFT_PREFIX, 1): value
            for key, value in state.items() if "text_model." not in key}


def peft_factors(net: ClipFeatures) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{name: (scale * B, A)}`` in float32 on the CPU, named as the linear in the plain
    ``ClipFeatures`` (so ``apply_deltas`` finds it on the un-adapted backbone)."""
    from peft.tuners.lora import LoraLayer

    out = {}
    for name, module in net.named_modules():
        if isinstance(module, LoraLayer) and "default" in module.lora_A:
            a = module.lora_A["default"].weight.detach().float().cpu()
            b = module.lora_B["default"].weight.detach().float().cpu() * module.scaling["default"]
            out[name.replace(f"clip.{PEFT_PREFIX}", "clip.", 1)] = (b, a.clone())
    return out
