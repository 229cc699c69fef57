"""The paper profile's pieces, fast: preflight (one line naming the key), the DomainBed file
index, image decoding / augmentation, the transformers ResNet classifier and the declared
resources. The end-to-end run is in test_domed_paper_shape.py (slow)."""
import json

import numpy as np
import pytest
import torch

from components.common.preflight import PreflightError
from components.domed import domainbed
from components.domed.config import DomedConfig
from flows.domed import METHOD
from flows.runtime.runner import validate_config
from tests.paper.layouts import write_image_folder

DOMAINS, CLASSES = ["art_painting", "cartoon", "photo"], ["dog", "guitar", "house"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("domainbed")
    write_image_folder(base / "PACS", CLASSES, per_class=5, domains=DOMAINS, size=20)
    return base


def paper(**sets):
    values = {"data": {"benchmarks": ["PACS"]}}
    for dotted, value in sets.items():
        section, key = dotted.split("__")
        values.setdefault(section, {})[key] = value
    return DomedConfig.for_profile("paper", values)


def test_paper_profile_without_paths_exits_in_one_line_naming_the_key():
    with pytest.raises(SystemExit) as err:
        validate_config(METHOD, "paper", {})
    message = str(err.value)
    assert "\n" not in message and "data.domainbed_root" in message and "<dataset>/<domain>/<class>" in message


def test_missing_dataset_folder_names_the_key_and_dataset(tmp_path):
    cfg = paper(data__domainbed_root=str(tmp_path), model__backbone_path="/nowhere")
    with pytest.raises(PreflightError, match=r"data\.domainbed_root .*PACS/"):
        cfg.preflight()


def test_missing_or_wrong_backbone_names_model_backbone_path(root, tmp_path):
    with pytest.raises(PreflightError, match=r"^model\.backbone_path = '/nowhere' is not a folder"):
        paper(data__domainbed_root=str(root), model__backbone_path="/nowhere").preflight()
    vit = tmp_path / "vit"
    vit.mkdir()
    (vit / "config.json").write_text(json.dumps({"model_type": "vit"}))
    (vit / "model.safetensors").write_bytes(b"")
    with pytest.raises(PreflightError, match=r"model\.backbone_path .*'vit' checkpoint"):
        paper(data__domainbed_root=str(root), model__backbone_path=str(vit)).preflight()


def test_test_envs_outside_every_domain_are_refused(root):
    with pytest.raises(PreflightError, match=r"^data\.test_envs = '\[7\]' names no domain of PACS"):
        paper(data__domainbed_root=str(root), data__test_envs=[7]).preflight()


def test_paper_preflight_passes_on_a_valid_tree_and_checkpoint(root, tiny_checkpoints):
    paper(data__domainbed_root=str(root), model__backbone_path=str(tiny_checkpoints.checkpoint("resnet"))).preflight()


def test_digit_benchmarks_under_domainbed_source_are_refused():
    cfg = DomedConfig.for_profile("paper", {"data": {"benchmarks": ["rotated_digits"]}})
    with pytest.raises(ValueError, match="digit benchmarks"):
        cfg.preflight()
    with pytest.raises(ValueError, match="data.source=domainbed"):
        DomedConfig.for_profile("small", {"data": {"benchmarks": ["PACS"]}}).preflight()


def test_index_sorts_domains_like_domainbed_and_holds_out_a_fifth_of_each(root):
    arrays = domainbed.index_dataset(str(root), "PACS", 0.2, seed=0)
    assert arrays["domains"].tolist() == DOMAINS and arrays["classes"].tolist() == CLASSES
    assert len(arrays["path"]) == 3 * 3 * 5 and (arrays["shortcut"] == -1).all()
    for d in range(3):
        assert arrays["is_out"][arrays["domain"] == d].sum() == 3      # round(0.2 x 15)
    for path, y, d in zip(arrays["path"], arrays["y"], arrays["domain"]):
        assert f"/{DOMAINS[d]}/{CLASSES[y]}/" in path
    again = domainbed.index_dataset(str(root), "PACS", 0.2, seed=0)
    np.testing.assert_array_equal(again["is_out"], arrays["is_out"])


def test_image_files_decode_normalised_and_augment_reproducibly(root):
    paths = domainbed.index_dataset(str(root), "PACS", 0.2, seed=0)["path"]
    files = domainbed.ImageFiles(paths, size=24, threads=2)
    batch = files[np.array([0, 3, 7])]
    assert batch.shape == (3, 3, 24, 24) and batch.dtype == torch.float32
    assert torch.equal(files[slice(0, 2)], files[np.array([0, 1])])              # plain decode is fixed
    assert batch.min() < 0 < batch.max()                                         # ImageNet-normalised
    first, second = files.augmented(5), files.augmented(5)
    rows = np.array([1, 2, 4, 8])
    a1, b1 = first[rows], second[rows]
    assert torch.equal(a1, b1)                                                   # same seed, same batch
    assert not torch.equal(first[rows], a1)                                      # next batch: new draws
    assert files.subset(np.array([2, 5])).paths.tolist() == [paths[2], paths[5]]


def test_resnet_classifier_loads_resnet_model_and_keeps_batchnorm_frozen(tiny_checkpoints):
    folder = tiny_checkpoints.checkpoint("resnet")      # a ResNetForImageClassification folder
    model = domainbed.ResNetClassifier(str(folder), n_classes=3, device="cpu").train()
    assert type(model.backbone).__name__ == "ResNetModel"
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and not any(m.training for m in bns) and model.head.training
    before = [m.running_mean.clone() for m in bns]
    logits = model(torch.randn(4, 3, 32, 32))
    assert logits.shape == (4, 3) and logits.dtype == torch.float32 and logits.device.type == "cpu"
    logits.sum().backward()
    assert all(torch.equal(b, m.running_mean) for b, m in zip(before, bns))     # statistics untouched
    assert model.head.weight.grad is not None


def test_heavy_stages_ask_for_a_gpu_in_the_paper_profile_only():
    for name in ("train_teachers", "train_erm", "teacher_predict", "train_student", "evaluate"):
        resources = METHOD.stage(name).resources
        assert resources.gpus("paper") == 1 and resources.gpus("small") == 0 and resources.gpus("smoke") == 0
    # downstream instances depend on their own (benchmark, seed) item, not every instance's folder
    assert METHOD.stage("teacher_predict").item_deps == ("train_teachers", "train_erm")
    assert METHOD.stage("evaluate").item_deps == ("train_erm", "train_student")


def test_evaluation_decode_is_domainbeds_bilinear_resize(root):
    # was the shared load_image's bicubic resize; DomainBed's Resize((224, 224)) is bilinear
    from PIL import Image

    path = domainbed.index_dataset(str(root), "PACS", 0.2, seed=0)["path"][0]
    image = Image.open(path).convert("RGB").resize((24, 24), Image.BILINEAR)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
    mean, std = (torch.tensor(v).view(3, 1, 1) for v in (domainbed.IMAGENET_MEAN, domainbed.IMAGENET_STD))
    decoded = domainbed.ImageFiles(np.array([path]), size=24, threads=1)[np.array([0])][0]
    torch.testing.assert_close(decoded, (pixels - mean) / std)


def test_hue_shift_rotates_hue_and_a_zero_shift_keeps_the_image():
    from PIL import Image

    red = Image.new("RGB", (4, 4), (255, 0, 0))
    assert np.asarray(domainbed.adjust_hue(red, 0.0))[0, 0].tolist() == [255, 0, 0]
    green = np.asarray(domainbed.adjust_hue(red, 1 / 3))[0, 0]           # a third of a turn: red -> green
    assert green[1] > 200 and green[0] < 60 and green[2] < 60
    blue = np.asarray(domainbed.adjust_hue(red, -1 / 3))[0, 0]           # negative shifts wrap around
    assert blue[2] > 200 and blue[0] < 60 and blue[1] < 60


def test_color_jitter_draws_all_four_factors_and_varies_hue():
    from PIL import Image

    red = Image.new("RGB", (4, 4), (200, 40, 40))
    hues = set()
    for seed in range(20):
        jittered = domainbed.color_jitter(red, np.random.default_rng(seed))
        hues.add(int(np.asarray(jittered.convert("HSV"))[0, 0, 0]))
    assert len(hues) > 10                                               # hue jitter is on
    again = [domainbed.color_jitter(red, np.random.default_rng(3)) for _ in range(2)]
    assert np.array_equal(np.asarray(again[0]), np.asarray(again[1]))
