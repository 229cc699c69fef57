"""The CLIP paper path of circumerge on a tiny CLIPVisionModel: image splits, prototype heads,
peft adapters (trained in the stage or loaded from folders, including pre-transformers-5 key
names) and the paper preflight, each naming its key."""
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from components.circumerge.adapters import load_task, train_adapters_stage
from components.circumerge.config import CircumergeConfig
from components.circumerge.tasks import prepare_tasks_stage
from components.circumerge.vision import ClipFeatures, ImageSplit, attach_peft, load_peft, peft_factors
from components.common.context import LocalContext
from components.common.io import load_torch
from components.common.peft_lora import save_adapter
from components.common.tiny_models import build_tiny
from flows.circumerge import METHOD
from flows.runtime.dag import DeclaredParams
from tests.paper.layouts import write_image_folder

TASKS = {"cars": ["sedan", "truck"], "dtd": ["dotted", "striped", "woven"]}


def declared(cfg, stage):
    return DeclaredParams(cfg, METHOD.stage(stage).params, stage)


def write_tasks(root, with_val=False):
    for i, (task, classes) in enumerate(TASKS.items()):
        for j, split in enumerate(("train", "test") + (("val",) if with_val else ())):
            write_image_folder(root / task / split, classes, per_class=5, seed=3 * i + j)
    return root


def paper_cfg(clip, data_root, adapters_root=None, **extra):
    sets = {"data": {"tasks": list(TASKS), "adapters_root": adapters_root and str(adapters_root)},
            "paper": {"vision_model": str(clip), "data_root": str(data_root), "device": "cpu",
                      "val_size": 3, "head_shots": 3},
            "model": {"rank": 2}, "train": {"steps": 3, "batch_size": 4, "lr": 1e-2}}
    for section, values in extra.items():
        sets[section] = {**sets.get(section, {}), **values}
    return CircumergeConfig.for_profile("paper", sets)


def prepare(tmp_path, cfg):
    ctx = LocalContext(tmp_path / "prep")
    prepare_tasks_stage(declared(cfg, "prepare_tasks"), ctx)
    return ctx


def test_prepare_holds_out_val_and_heads_are_unit_prototypes(tmp_path, tiny_checkpoints):
    cfg = paper_cfg(tiny_checkpoints.checkpoint("clip_vision"), write_tasks(tmp_path / "img"))
    ctx = prepare(tmp_path, cfg)
    assert ctx.summary["n_images/cars/val"] == 3 and ctx.summary["n_images/cars/train"] == 2 * 5 - 3
    assert ctx.summary["n_train"] == 7 + 12
    record = load_task(ctx.out_dir, "dtd")
    assert isinstance(record["train"]["x"], ImageSplit) and record["classes"] == TASKS["dtd"]
    assert not set(record["train"]["paths"]) & set(record["val"]["paths"])   # held out, not shared
    batch = record["test"]["x"][torch.tensor([0, 2])]
    assert batch.shape == (2, 3, 32, 32) and record["test"]["x"][1:3].shape == batch.shape
    assert torch.allclose(record["head"]["weight"].norm(dim=-1), torch.ones(3), atol=1e-5)


def test_val_folder_is_used_when_present(tmp_path, tiny_checkpoints):
    cfg = paper_cfg(tiny_checkpoints.checkpoint("clip_vision"), write_tasks(tmp_path / "img", with_val=True))
    ctx = prepare(tmp_path, cfg)
    assert ctx.summary["n_images/cars/train"] == ctx.summary["n_images/cars/val"] == 2 * 5


def test_train_adapters_stage_trains_peft_lora_on_clip(tmp_path, tiny_checkpoints):
    cfg = paper_cfg(tiny_checkpoints.checkpoint("clip_vision"), write_tasks(tmp_path / "img"))
    prep = prepare(tmp_path, cfg)
    ctx = LocalContext(tmp_path / "cars", inputs={"prepare_tasks": prep.out_dir}, item={"task": "cars"})
    train_adapters_stage(declared(cfg, "train_adapters"), ctx)
    saved = load_torch(ctx.out_dir / "adapter.pt")
    assert len(saved["layers"]) == 2 * 4    # q, k, v, out projections of both blocks
    b, a = saved["factors"]["clip.encoder.layers.0.self_attn.q_proj"].values()
    assert b.shape == (32, 2) and a.shape == (2, 32) and b.abs().sum() > 0   # trained away from B = 0
    assert 0 <= ctx.summary["test_acc"] <= 100


def _adapter_folder(folder, seed=0):
    torch.manual_seed(seed)
    net = attach_peft(ClipFeatures(build_tiny("clip_vision")), ["q_proj", "v_proj"], 2, 4.0)
    for name, p in net.named_parameters():
        if "lora_B" in name:
            p.data.normal_()
    save_adapter(net.clip, folder)
    return peft_factors(net)


def _rename_keys(folder, old, new):
    path = folder / "adapter_model.safetensors"
    save_file({k.replace(old, new): v for k, v in load_file(str(path)).items()}, str(path))


def test_load_peft_reads_adapters_saved_with_the_vision_model_level(tmp_path):
    """Regression: pre-transformers-5 adapters (KnOTS') name ``vision_model.``; peft matched none
    of their keys on transformers 5's CLIPVisionModel and left every B at zero."""
    expected = _adapter_folder(tmp_path / "ad")
    _rename_keys(tmp_path / "ad", "base_model.model.", "base_model.model.vision_model.")
    loaded = peft_factors(load_peft(ClipFeatures(build_tiny("clip_vision")), tmp_path / "ad"))
    assert loaded.keys() == expected.keys()
    for name, (b, a) in expected.items():
        assert torch.allclose(loaded[name][0], b) and torch.equal(loaded[name][1], a)


def test_load_peft_fails_when_no_key_matches(tmp_path):
    _adapter_folder(tmp_path / "ad")
    _rename_keys(tmp_path / "ad", "encoder.layers", "blocks")
    with pytest.raises(ValueError, match="matched no layer"):
        load_peft(ClipFeatures(build_tiny("clip_vision")), tmp_path / "ad")


def test_paper_preflight_names_each_missing_key(tmp_path, tiny_checkpoints):
    clip = tiny_checkpoints.checkpoint("clip_vision")
    with pytest.raises(FileNotFoundError, match="paper.vision_model"):
        paper_cfg(tmp_path / "nowhere", tmp_path).preflight()
    with pytest.raises(FileNotFoundError, match=r"paper.vision_model .*not CLIP"):
        paper_cfg(tiny_checkpoints.checkpoint("resnet"), tmp_path).preflight()
    with pytest.raises(FileNotFoundError, match=r"paper.data_root .*cars/train"):
        paper_cfg(clip, tmp_path).preflight()
    data_root = write_tasks(tmp_path / "img")
    paper_cfg(clip, data_root).preflight()                     # adapters are optional
    _adapter_folder(tmp_path / "adapters" / "cars")
    with pytest.raises(FileNotFoundError, match=r"data.adapters_root .*'dtd'"):
        paper_cfg(clip, data_root, tmp_path / "adapters").preflight()
    shutil.copytree(tmp_path / "adapters" / "cars", tmp_path / "adapters" / "dtd")
    paper_cfg(clip, data_root, tmp_path / "adapters").preflight()
    with pytest.raises(ValueError, match="data.kind is not clip"):
        CircumergeConfig.for_profile("small", {"data": {"adapters_root": str(tmp_path)}}).preflight()
