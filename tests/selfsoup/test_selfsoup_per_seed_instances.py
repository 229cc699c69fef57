"""v4 runs every ingredient (and every fine-tune) of a seed in one stage instance; each must come
out exactly as if it had run alone, so the instrument did not change with the consolidation."""
import torch

from components.common.context import LocalContext
from components.common.io import load_torch
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.data import downstream_unlabelled, load_splits
from components.selfsoup.ssl import inter_train_one, inter_train_stage, start
from flows.selfsoup import METHOD
from tests.selfsoup.chain import run_chain


def test_an_ingredient_trained_after_another_equals_it_trained_alone(tmp_path):
    cfg = SelfsoupConfig.for_profile("smoke", {"stock": {"steps": 5}, "inter_train": {"steps": 6}})
    run_chain(METHOD, cfg, tmp_path, only_until="pretrain_stock")
    inputs = {"prepare_data": tmp_path / "prepare_data" / "out",
              "pretrain_stock": {"0": tmp_path / "pretrain_stock" / "0"}}
    ctx = LocalContext(out_dir=tmp_path / "inter_train" / "0", inputs=inputs, item={"seed": 0})
    inter_train_stage(cfg, ctx)  # mae_lr1, then moco_t0p1
    assert {"mae_lr1_knn_val_acc", "moco_t0p1_knn_val_acc", "moco_t0p1_head_mean_cosine_val"} <= ctx.summary.keys()

    second = cfg.inter_train.ingredients[1]
    start(0)
    alone = tmp_path / "alone"
    alone.mkdir()
    images = downstream_unlabelled(load_splits(inputs["prepare_data"]))
    inter_train_one(cfg, second, inputs["pretrain_stock"]["0"], images, cfg.inter_train.steps, alone)
    together = load_torch(tmp_path / "inter_train" / "0" / second / "encoder.pt")
    stock = load_torch(tmp_path / "pretrain_stock" / "0" / "encoder.pt")
    solo = load_torch(alone / "encoder.pt")
    assert any(not torch.equal(solo[k], stock[k]) for k in solo)  # it trained
    assert all(torch.equal(solo[k], together[k]) for k in solo)
