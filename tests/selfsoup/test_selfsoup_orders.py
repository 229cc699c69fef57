"""v7: finetune.orders = k fine-tunes every model under k batch orders; P4 judges the k-order
mean val accuracy, while the model kept (soups, evaluation, val_acc) is order 0's, the same
fine-tune as with one order (v5)."""
import pytest
import torch

from components.common.io import load_torch, read_json, write_json_atomic
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.data import load_splits
from components.selfsoup.evaluate import premises
from components.selfsoup.finetune import fine_tune_model, order_seed
from flows.selfsoup import METHOD
from tests.selfsoup.chain import run_chain

TINY = {"stock": {"steps": 5}, "inter_train": {"steps": 4}, "robustness": {"steps": 4}, "finetune": {"epochs": 1}}


def _chain(tmp_path):
    cfg = SelfsoupConfig.for_profile("smoke", TINY)
    run_chain(METHOD, cfg, tmp_path, only_until="inter_train")
    inputs = {"prepare_data": tmp_path / "prepare_data" / "out",
              "pretrain_stock": {"0": tmp_path / "pretrain_stock" / "0"},
              "inter_train": {"0": tmp_path / "inter_train" / "0"}}
    return inputs, load_splits(inputs["prepare_data"])


def test_order_zero_is_the_seed_and_orders_differ():
    assert order_seed(9, 0) == 9
    assert len({order_seed(s, o) for s in (9, 10, 11, 100, 101, 102) for o in range(3)}) == 18


def test_one_order_is_v5_and_order_zero_is_kept_under_k(tmp_path):
    inputs, splits = _chain(tmp_path)
    one = SelfsoupConfig.for_profile("smoke", TINY | {"finetune": {"epochs": 1, "orders": 1}})
    three = SelfsoupConfig.for_profile("smoke", TINY | {"finetune": {"epochs": 1, "orders": 3}})
    s1 = fine_tune_model(one, "mae_lr1", 0, inputs, splits, tmp_path / "k1")
    s3 = fine_tune_model(three, "mae_lr1", 0, inputs, splits, tmp_path / "k3")
    assert set(s1) == {"val_acc", "lr", "val_acc_lr0.001"}  # v5's val.json
    m1, m3 = load_torch(tmp_path / "k1" / "model.pt"), load_torch(tmp_path / "k3" / "model.pt")
    assert all(torch.equal(m1[k], m3[k]) for k in m1)
    assert s3["val_acc"] == s3["val_acc_o0"] == s1["val_acc"]
    assert s3["val_acc_mean"] == pytest.approx(sum(s3[f"val_acc_o{o}"] for o in range(3)) / 3)
    assert read_json(tmp_path / "k3" / "val.json") == s3


def test_p4_uses_the_k_order_mean_when_present(tmp_path):
    class Ctx:
        inputs = {"fine_tune": {}, "soup": {}}

    for seed, (stock, ingr) in {0: ((0.50, 0.60), (0.55, 0.50)), 1: ((0.40, 0.50), (0.45, 0.40))}.items():
        d = tmp_path / "ft" / str(seed)
        Ctx.inputs["fine_tune"][str(seed)] = d
        Ctx.inputs["soup"][str(seed)] = tmp_path / "soup" / str(seed)
        write_json_atomic(tmp_path / "soup" / str(seed) / "soup.json", {"barriers": {}, "distances": {}})
        for name, (first, mean) in {"stock": stock, "mae_lr1": ingr}.items():
            (d / name).mkdir(parents=True)
            write_json_atomic(d / name / "val.json", {"val_acc": first, "val_acc_mean": mean})
    cfg = SelfsoupConfig.for_profile("smoke")
    out = premises(cfg, Ctx, [0], ["mae_lr1"])
    assert out["ingredient_minus_stock_val_min"] == pytest.approx(-10.0)    # means: 50 - 60
    assert out["ingredient_minus_stock_val_order0_min"] == pytest.approx(5.0)  # order 0: 55 - 50


def test_orders_must_be_positive():
    with pytest.raises(ValueError, match="finetune.orders"):
        SelfsoupConfig.for_profile("smoke", {"finetune": {"orders": 0}})
