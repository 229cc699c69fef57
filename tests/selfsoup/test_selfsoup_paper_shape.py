"""selfsoup's paper profile end to end (runtime: DVC + Prefect + MLflow) on a tiny random
ViT-MAE built from ViTMAEConfig, a mini-VTAB task written as parquet shards and its corruptions
in ImageNet-C's folder layout; steps shrunk by --set."""
import math

import pytest
import torch

from components.common.hf_models import load_model
from components.common.io import load_torch, read_json, read_table
from tests.paper.harness import run_paper_shape
from tests.selfsoup.paper_layouts import write_imagenet_c, write_minivtab

# slow-marked to keep the CI run under 30 minutes (it ran there at 40-55 s); `make test-all` runs it
pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]

CORRUPTIONS = ["gaussian_noise", "contrast"]
INGREDIENTS = "[mae_lr1,moco_t0p1]"
SHRINK = [
    "seeds=[0]", "model.device=cpu", "model.num_classes=4",
    "data.image_size=32", "data.n_train=28", "data.n_val=8", f"data.corruptions=[{','.join(CORRUPTIONS)}]",
    "data.severities=[1,3]", f"data.shift_corruptions=[{','.join(CORRUPTIONS)}]", "data.shift_severity=3",
    f"inter_train.ingredients={INGREDIENTS}", "inter_train.steps=2", "inter_train.batch=8",
    f"robustness.ingredients={INGREDIENTS}", "robustness.steps=2",
    "finetune.models=[stock,mae_lr1,moco_t0p1,selfsoup_clean,selfsoup_shift]", "finetune.lrs=[0.001]",
    "finetune.epochs=1", "finetune.batch=8", "season.epochs=2", "season.batch=16",
]


def test_selfsoup_paper_profile_on_tiny_vit_mae_and_minivtab_layout(tmp_path, tiny_checkpoints):
    data = write_minivtab(tmp_path / "mini-VTAB")
    corrupted = write_imagenet_c(tmp_path / "mini-VTAB-C", CORRUPTIONS, [1, 3])
    stock = tiny_checkpoints.checkpoint("vit_mae")
    sets = SHRINK + [f"data.root={data}", f"data.corrupted_root={corrupted}", f"stock.checkpoint={stock}"]
    result = run_paper_shape("selfsoup", tmp_path / "project", sets)

    prepared = result.metrics("selfsoup", "prepare_data")
    assert (prepared["n_train"], prepared["n_val"], prepared["n_test"], prepared["n_corrupted_sets"]) == (28, 8, 16, 4)

    # the stock is the checkpoint's ViT-MAE, read as it is (no stock pre-training in the paper profile)
    stock_dir = result.out("selfsoup", "pretrain_stock", "0")
    arch = read_json(stock_dir / "arch.json")
    assert arch["family"] == "vit_mae" and arch["config"]["hidden_size"] == 32
    released = load_model(stock, "pretraining", device="cpu").vit.state_dict()
    encoder = load_torch(stock_dir / "encoder.pt")
    assert encoder.keys() == {f"vit.{k}" for k in released}
    assert all(torch.equal(encoder[f"vit.{k}"], v) for k, v in released.items())

    table = read_table(result.out("selfsoup", "evaluate", "0") / "metrics.parquet").to_pandas()
    assert set(table.model) == {"stock", "mae_lr1", "moco_t0p1", "selfsoup_clean", "selfsoup_shift",
                                "uniform_soup", "greedy_soup"}
    assert set(table.set) == {"clean", "gaussian_noise_1", "gaussian_noise_3", "contrast_1", "contrast_3"}
    assert table.acc.between(0, 1).all() and table.nll.map(math.isfinite).all()

    season = read_json(result.out("selfsoup", "self_season", "0") / "season.json")
    assert set(season["weights"]) == {"stock", "mae_lr1", "moco_t0p1"}
    assert abs(sum(season["weights"].values()) - 1) < 1e-6

    metrics = result.metrics("selfsoup", "report")
    for key in ("soup_minus_mean_ingredient", "soup_minus_best_ingredient", "greedy_minus_best_ingredient",
                "season_minus_stock_knn", "shift_minus_selfsoup_clean_shift_sets", "shift_minus_stock_shift_sets",
                "premise_barrier_mean", "premise_distance_min", "acc_contrast_selfsoup_shift"):
        assert math.isfinite(metrics[key]), key
    assert all(isinstance(metrics[f"pass_{c}"], bool) for c in "abcd")
