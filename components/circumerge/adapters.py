"""Loading prepared tasks, evaluating a (merged) backbone, and the ``train_adapters`` stage."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from components.circumerge.models import backbone, head_logits
from components.circumerge.vision import as_image_splits, attach_peft, load_peft, peft_factors
from components.common.io import load_torch, save_torch, write_json_atomic
from components.common.lora import inject_lora, lora_state
from components.common.seeds import seed_everything
from components.common.train import fit


def load_backbone(prep_dir: Path) -> tuple[str, torch.nn.Module]:
    saved = load_torch(Path(prep_dir) / "backbone.pt")
    return saved["kind"], backbone(saved["kind"], saved["spec"])


def load_task(prep_dir: Path, task: str) -> dict:
    return as_image_splits(load_torch(Path(prep_dir) / "tasks" / f"{task}.pt"))


def adapted_layer_names(kind: str, model_cfg) -> list[str]:
    """Names of the linears that get a LoRA adapter."""
    if kind == "minilm":
        n_upper = model_cfg.n_layers - model_cfg.first_adapted_layer
        return [f"layer.{i}.{t}" for i in range(n_upper) for t in model_cfg.lora_targets]
    return list(model_cfg.lora_targets)


def _rows(split: dict, idx) -> tuple:
    mask = split["mask"][idx] if split["mask"] is not None else None
    return split["x"][idx], mask


@torch.inference_mode()
def accuracy(net: torch.nn.Module, split: dict, head: dict, batch: int = 256) -> float:
    """Top-1 accuracy of ``head(net(x))`` on one split."""
    net.eval()
    correct = 0
    for start in range(0, len(split["y"]), batch):
        idx = slice(start, start + batch)
        logits = head_logits(net(*_rows(split, idx)), head)
        correct += int((logits.argmax(-1) == split["y"][idx]).sum())
    return 100.0 * correct / len(split["y"])


def train_adapter(net: torch.nn.Module, record: dict, train_cfg, seed: int, ctx=None) -> None:
    """Fit the LoRA parameters of ``net`` on the task's train split (head frozen)."""
    split, head = record["train"], record["head"]
    gen = torch.Generator().manual_seed(seed)
    n = len(split["y"])

    def batches():
        while True:
            idx = torch.randint(0, n, (train_cfg.batch_size,), generator=gen)
            yield _rows(split, idx), split["y"][idx]

    def loss_fn(model, batch):
        (x, mask), y = batch
        return F.cross_entropy(head_logits(model(x, mask), head), y)

    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
    fit(net, batches(), loss_fn, steps=train_cfg.steps, optimizer=optimizer,
        warmup=max(1, train_cfg.steps // 10), ctx=ctx, log_every=max(1, train_cfg.steps // 10))


def adapt(kind: str, net: torch.nn.Module, record: dict, cfg, task: str, seed: int, ctx
          ) -> tuple[list[str], dict]:
    """Give ``net`` the task's adapter (trained here, or a peft folder under data.adapters_root
    for CLIP); returns the adapted layer names and their effective factors
    ``{layer: {"B": scale * B, "A": A}}``."""
    if kind != "clip":
        names = inject_lora(net, adapted_layer_names(kind, cfg.model), cfg.model.rank, cfg.model.lora_alpha)
        train_adapter(net, record, cfg.train, seed, ctx)
        return names, lora_state(net)
    if cfg.data.adapters_root:
        load_peft(net, Path(cfg.data.adapters_root).expanduser() / task)
    else:
        attach_peft(net, list(cfg.model.lora_targets), cfg.model.rank, cfg.model.lora_alpha)
        train_adapter(net, record, cfg.train, seed, ctx)
    factors = {name: {"B": b, "A": a} for name, (b, a) in peft_factors(net).items()}
    return list(factors), factors


def train_adapters_stage(cfg, ctx) -> None:
    task = ctx.item["task"]
    prep = ctx.inputs["prepare_tasks"]
    seed = cfg.data.data_seed + cfg.data.tasks.index(task)
    seed_everything(seed)
    kind, net = load_backbone(prep)
    record = load_task(prep, task)
    zero_shot = {s: accuracy(net, record[s], record["head"]) for s in ("val", "test")}
    names, factors = adapt(kind, net, record, cfg, task, seed, ctx)
    tuned = {s: accuracy(net, record[s], record["head"]) for s in ("train", "val", "test")}
    save_torch(ctx.out_dir / "adapter.pt", {"task": task, "layers": names, "factors": factors})
    accuracies = {"zero_shot_val_acc": zero_shot["val"], "zero_shot_test_acc": zero_shot["test"],
                  "train_acc": tuned["train"], "val_acc": tuned["val"], "test_acc": tuned["test"]}
    write_json_atomic(ctx.out_dir / "accuracy.json", accuracies)  # read downstream for normalisation
    ctx.write_metrics(accuracies)
