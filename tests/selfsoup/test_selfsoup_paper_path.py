"""The paper path's pieces without the runtime: stock.checkpoint is read (it used to be
ignored), the ViT-MAE adapter computes what transformers' own ViTMAEForPreTraining computes,
and a missing or malformed paper path fails in one line naming its key."""
import pytest
import torch

from components.common.hf_models import load_model, save_model
from components.common.io import load_torch
from components.common.tiny_models import build_tiny
from components.selfsoup import backbone, losses
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.vit import patchify
from tests.selfsoup.paper_layouts import write_imagenet_c, write_minivtab


@pytest.fixture(scope="module")
def grey_vit_mae(tmp_path_factory):
    """A tiny ViT-MAE for the digits' 1 x 16 x 16 images, saved with save_pretrained."""
    model = build_tiny("vit_mae", image_size=16, patch_size=4, num_channels=1)
    return save_model(model, tmp_path_factory.mktemp("grey-vit-mae"))


def run_stock(tmp_path, checkpoint, steps: int):
    from flows.selfsoup import METHOD
    from tests.selfsoup.chain import run_chain

    config = SelfsoupConfig.for_profile("smoke", {"stock": {"checkpoint": str(checkpoint), "steps": steps},
                                                   "data": {"n_source": 64}})
    config.preflight()
    run_chain(METHOD, config, tmp_path, only_until="pretrain_stock")
    return tmp_path / "pretrain_stock" / "0"


def test_stock_checkpoint_is_read(tmp_path, grey_vit_mae):
    """Regression: stock.checkpoint was checked by the preflight and then ignored (the stock
    was a fresh tiny ViT); now the stock's encoder is the checkpoint's, weight for weight."""
    stock_dir = run_stock(tmp_path, grey_vit_mae, steps=0)
    released = load_model(grey_vit_mae, "pretraining", device="cpu")
    encoder, decoder = (load_torch(stock_dir / f) for f in ("encoder.pt", "decoder.pt"))
    assert encoder.keys() == {f"vit.{k}" for k in released.vit.state_dict()}
    assert all(torch.equal(encoder[f"vit.{k}"], v) for k, v in released.vit.state_dict().items())
    assert all(torch.equal(decoder[f"decoder.{k}"], v) for k, v in released.decoder.state_dict().items())
    assert backbone.read_arch(stock_dir)["config"]["hidden_size"] == released.config.hidden_size


def test_stock_checkpoint_continues_mae_when_asked(tmp_path, grey_vit_mae):
    """With stock.steps > 0 (small profile only) MAE training starts from the checkpoint."""
    stock_dir = run_stock(tmp_path, grey_vit_mae, steps=2)
    released = load_model(grey_vit_mae, "pretraining", device="cpu").vit.state_dict()
    encoder = load_torch(stock_dir / "encoder.pt")
    assert encoder.keys() == {f"vit.{k}" for k in released}
    assert not torch.equal(encoder["vit.layers.0.mlp.fc1.weight"], released["layers.0.mlp.fc1.weight"])


def test_vit_mae_adapter_matches_transformers_pretraining_forward():
    """Our masking (visible-patch indices) + decoder adapter + MAE loss give transformers'
    ViTMAEForPreTraining logits and loss for the same mask."""
    model = build_tiny("vit_mae")                       # 3 x 32 x 32, patch 8: 16 patches
    cfg = model.config
    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    noise = torch.rand(3, 16, generator=torch.Generator().manual_seed(1))
    encoder = backbone.ViTMAEEncoder(model.vit)
    decoder = backbone.ViTMAEDecoderAdapter(model.decoder)
    with torch.no_grad():
        ref = model(pixel_values=encoder.normalize(images), noise=noise)
        n_keep = int(16 * (1 - cfg.mask_ratio))
        keep = noise.argsort(dim=1)[:, :n_keep]
        pred = decoder(encoder.tokens(images, keep), keep, 16)
    masked = torch.ones(3, 16, dtype=torch.bool).scatter(1, keep, False)
    assert torch.equal(masked, ref.mask.bool())
    assert torch.allclose(pred, ref.logits, atol=1e-5)
    ours = losses.mae_loss(pred, patchify(encoder.normalize(images), encoder.patch), masked)
    assert ours.item() == pytest.approx(ref.loss.item(), rel=1e-5)


def test_vit_mae_encoder_cls_is_transformers_cls():
    model = build_tiny("vit_mae", mask_ratio=0.0)
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    encoder = backbone.ViTMAEEncoder(model.vit)
    with torch.no_grad():
        ref = model.vit(pixel_values=encoder.normalize(images), noise=torch.arange(16.0).expand(2, -1))
        assert torch.allclose(encoder(images), ref.last_hidden_state[:, 0], atol=1e-5)


def test_restore_order_puts_visible_then_masked_patches_back():
    keep = torch.tensor([[3, 0], [1, 2]])
    restore = backbone.restore_order(keep, 4)
    # sequence = [visible in keep order, masked ascending]; gathering by restore gives patch order
    layout = torch.tensor([[3, 0, 1, 2], [1, 2, 0, 3]])
    assert torch.equal(torch.gather(layout, 1, restore), torch.arange(4).expand(2, -1))


# ---- preflight: one line naming the key ----

@pytest.fixture(scope="module")
def paper_paths(tmp_path_factory, tiny_checkpoints):
    root = tmp_path_factory.mktemp("selfsoup-paper")
    return {"data.root": str(write_minivtab(root / "mini-VTAB")),
            "data.corrupted_root": str(write_imagenet_c(root / "mini-VTAB-C", ["contrast"], [1, 3])),
            "stock.checkpoint": str(tiny_checkpoints.checkpoint("vit_mae"))}


def preflight_message(sets: dict) -> str:
    from flows.runtime.runner import validate_config
    from flows.selfsoup import METHOD

    base = {"model.num_classes": 4, "data.image_size": 32, "data.corruptions": ["contrast"],
            "data.severities": [1, 3], "data.shift_corruptions": ["contrast"]}
    overrides: dict = {}
    for key, value in (base | sets).items():
        section, _, name = key.partition(".")
        overrides.setdefault(section, {})[name] = value
    with pytest.raises(SystemExit) as err:
        validate_config(METHOD, "paper", overrides)
        raise SystemExit("")  # no problem found
    return str(err.value)


def test_paper_preflight_passes_on_complete_paths(paper_paths):
    assert preflight_message(paper_paths) == ""


@pytest.mark.parametrize("key, bad, words", [
    ("data.root", "", "is not set"),
    ("data.root", "/nonexistent/mini-VTAB", "is not a folder"),
    ("data.task", "eurosat", "has no eurosat/train-*.parquet"),
    ("data.corrupted_root", "", "is not set"),
    ("data.shift_severity", 5, "has no contrast/5/<class>/ folders"),
    ("stock.checkpoint", "", "is not set"),
    ("model.num_classes", 100, "set model.num_classes=4"),
    ("data.image_size", 224, "takes 3x32 px images"),
    ("stock.steps", 10, "set stock.steps=0"),
])
def test_paper_preflight_fails_in_one_line_naming_the_key(paper_paths, key, bad, words):
    message = preflight_message(paper_paths | {key: bad})
    named = "data.corrupted_root" if key == "data.shift_severity" else \
        "data.root" if key in ("data.task",) else "stock.checkpoint" if key == "data.image_size" else key
    assert "\n" not in message and named in message and words in message, message


def test_paper_preflight_rejects_a_checkpoint_that_is_not_vit_mae(paper_paths, tiny_checkpoints):
    message = preflight_message(paper_paths | {"stock.checkpoint": str(tiny_checkpoints.checkpoint("clip_vision"))})
    assert "stock.checkpoint" in message and "not vit_mae" in message and "\n" not in message


def test_uint8_images_are_embedded_as_their_float_pixels():
    """Regression: the paper's images are stored as uint8; embedding them used to feed 0-255
    values to the encoder (the linear probe and kNN saw a different input scale than training)."""
    from components.selfsoup.vit import embed

    encoder = backbone.ViTMAEEncoder(build_tiny("vit_mae").vit)
    pixels = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(embed(encoder, pixels), embed(encoder, pixels.float() / 255), atol=1e-6)


def test_imagenet_layout_splits_and_corruptions_read_with_clean_class_order(tmp_path):
    """data.source = imagefolder: train/val class folders; ImageNet-C sets labelled by the
    clean classes' order, whatever folders a set has."""
    from components.selfsoup.paper_data import load_corrupted_sets, load_paper_splits
    from tests.paper.layouts import write_image_folder

    classes = ["n01440764", "n01443537", "n01484850"]
    write_image_folder(tmp_path / "imagenet" / "train", classes, per_class=4, size=40)
    write_image_folder(tmp_path / "imagenet" / "val", classes, per_class=2, size=40, seed=1)
    write_image_folder(tmp_path / "imagenet-c" / "fog" / "2", classes[1:], per_class=2, size=32, seed=2)
    cfg = SelfsoupConfig.for_profile("paper", {
        "data": {"source": "imagefolder", "root": str(tmp_path / "imagenet"), "image_size": 32, "n_train": 6,
                 "n_val": 3, "corrupted_root": str(tmp_path / "imagenet-c")}})
    splits, found = load_paper_splits(cfg.data)
    assert found == classes
    assert splits["train"]["x"].shape == (6, 3, 32, 32) and splits["train"]["x"].dtype == torch.uint8
    assert len(splits["val"]["y"]) == 3 and splits["test"]["y"].tolist() == [0, 0, 1, 1, 2, 2]
    fog = load_corrupted_sets(cfg.data, found, ["fog_2"])["fog_2"]
    assert fog["y"].tolist() == [1, 1, 2, 2]


def test_non_square_images_are_short_side_resized_and_centre_cropped():
    from components.selfsoup.paper_data import decode
    from tests.selfsoup.paper_layouts import png_bytes

    wide = torch.zeros(30, 60, 3, dtype=torch.uint8)
    wide[:, 20:40] = 255                                  # a bright centre band survives the crop
    out = decode(png_bytes(wide.numpy()), 16)
    assert out.shape == (3, 16, 16) and out[:, :, 8].min() > 200 and out[:, :, 0].max() < 50
