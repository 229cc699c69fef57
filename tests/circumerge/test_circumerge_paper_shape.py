"""circumerge's paper profile end to end (runtime: DVC + Prefect + MLflow) on a tiny
CLIPVisionModel built from CLIPVisionConfig, two peft LoRA adapters trained a few steps on
generated images and saved as adapter folders (as KnOTS ships them), and image folders in the
<task>/{train,test}/<class>/<image> layout; sizes shrunk by --set."""
import math

import pytest
import torch
import torch.nn.functional as F

from components.circumerge.vision import ClipFeatures, attach_peft, peft_factors
from components.common.hf_models import load_model
from components.common.io import load_torch, read_json, read_table
from components.common.peft_lora import save_adapter
from components.common.readers import image_folder, load_image
from tests.paper.harness import run_paper_shape
from tests.paper.layouts import write_image_folder

pytestmark = pytest.mark.paper_shape

TASKS = {"cars": ["sedan", "truck", "van"], "dtd": ["dotted", "striped"]}
TARGETS = ["q_proj", "k_proj", "v_proj", "out_proj"]


def write_tasks(root):
    for i, (task, classes) in enumerate(TASKS.items()):
        write_image_folder(root / task / "train", classes, per_class=8, seed=2 * i)
        write_image_folder(root / task / "test", classes, per_class=4, seed=2 * i + 1)
    return root


def train_adapter_folders(clip_folder, data_root, out, steps=3):
    """A peft LoRA per task, trained a few steps with a random linear head, saved as a folder."""
    factors = {}
    for i, task in enumerate(TASKS):
        torch.manual_seed(i)
        net = attach_peft(ClipFeatures(load_model(clip_folder, "encoder", device="cpu")), TARGETS, 4, 8.0)
        records, classes = image_folder(str(data_root / task / "train"))
        x = torch.stack([load_image(r.path, 32) for r in records])
        y = torch.tensor([r.label for r in records])
        head = torch.randn(len(classes), 32)
        opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-2)
        for _ in range(steps):
            loss = F.cross_entropy(10 * net(x) @ head.T, y)
            opt.zero_grad(), loss.backward(), opt.step()
        save_adapter(net.clip, out / task)
        factors[task] = peft_factors(net)
    return factors


def test_circumerge_paper_profile_on_tiny_clip_and_peft_adapters(tmp_path, tiny_checkpoints):
    clip = tiny_checkpoints.checkpoint("clip_vision")
    data_root = write_tasks(tmp_path / "images")
    trained = train_adapter_folders(clip, data_root, tmp_path / "adapters")
    sets = [f"paper.vision_model={clip}", f"paper.data_root={data_root}", f"data.adapters_root={tmp_path / 'adapters'}",
            f"data.tasks=[{','.join(TASKS)}]", "paper.device=cpu", "paper.val_size=4", "paper.head_shots=4",
            "seeds=[0]", "merge.repeats=1", "tune.alphas=[0.5,1.0]", "timing.dim=64", "timing.n_tasks=2",
            "timing.rank=4", "timing.n_matrices=1", "timing.repeats=1", "timing.threads=[1]"]
    result = run_paper_shape("circumerge", tmp_path / "project", sets)

    prep = result.metrics("circumerge", "prepare_tasks")
    assert prep["n_images/cars/train"] == 3 * 8 - 4 and prep["n_images/cars/val"] == 4
    assert prep["n_images/dtd/test"] == 2 * 4
    for task in TASKS:
        acc = result.metrics("circumerge", "train_adapters", task)
        assert all(0 <= acc[k] <= 100 for k in ("zero_shot_test_acc", "val_acc", "test_acc"))
        saved = load_torch(result.out("circumerge", "train_adapters", task) / "adapter.pt")
        # every adapted projection of the 2 blocks, read from the peft folder with its scale folded in
        assert len(saved["layers"]) == 2 * len(TARGETS)
        assert all(name.startswith("clip.encoder.layers.") for name in saved["layers"])
        for name, (b, a) in trained[task].items():
            assert torch.allclose(saved["factors"][name]["B"], b) and torch.equal(saved["factors"][name]["A"], a)

    merges = read_table(result.out("circumerge", "merge") / "merges.parquet").to_pandas().set_index("key")
    assert len(merges) == 3 * 3 and set(merges[merges.space != "full"].adapter_rank) == {2 * 4}
    assert merges.loc["circumerge-ta-0", "rel_err_vs_core"] < 1e-5
    evaluate = result.metrics("circumerge", "evaluate")
    for space in ("full", "core", "circumerge"):
        for rule in ("ta", "ties", "tsv"):
            assert math.isfinite(evaluate[f"normalised_acc/{space}-{rule}"])
    claims = read_json(result.out("circumerge", "evaluate") / "claims.json")
    assert claims["label"] == "CircuMerge (our instantiation)" and set(claims["individual_test_acc"]) == set(TASKS)
