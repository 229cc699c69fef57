"""v6 MAE recipe knobs (norm_pix, fresh_decoder, augment) and the inter_train_one output folder."""
import pytest
import torch

from components.common.io import load_torch
from components.selfsoup import ssl
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.data import downstream_unlabelled, load_splits
from flows.selfsoup import METHOD
from tests.selfsoup.chain import run_chain


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    root = tmp_path_factory.mktemp("stock")
    cfg = SelfsoupConfig.for_profile("smoke", {"stock": {"steps": 3}, "inter_train": {"steps": 3}})
    run_chain(METHOD, cfg, root, only_until="pretrain_stock")
    return cfg, root / "pretrain_stock" / "0", downstream_unlabelled(load_splits(root / "prepare_data" / "out"))


def test_inter_train_one_makes_its_own_folder(stock, tmp_path):
    """v6 fix: like fine_tune_model, inter_train_one creates out_dir (v5's caller had to)."""
    cfg, stock_dir, images = stock
    ssl.start(0)
    out = tmp_path / "not" / "there"
    ssl.inter_train_one(cfg, "mae_lr1", stock_dir, images, 2, out)
    assert (out / "encoder.pt").exists()


def test_mae_knobs_reach_the_learner(stock, tmp_path, monkeypatch):
    cfg, stock_dir, images = stock
    monkeypatch.setattr(ssl, "train_ssl", lambda *a, **k: [])  # the learner as built, untrained
    recipes = cfg.inter_train.recipes
    variants = {"plain": recipes["mae_lr1"],
                "fresh": recipes["mae_lr1"].model_copy(update={"fresh_decoder": True}),
                "npix": recipes["mae_lr1"].model_copy(update={"norm_pix": True, "augment": False})}
    learners = {}
    for name, recipe in variants.items():
        c = cfg.model_copy(deep=True)
        c.inter_train.recipes["mae_lr1"] = recipe
        ssl.start(0)
        learners[name] = ssl.inter_train_one(c, "mae_lr1", stock_dir, images, 1, tmp_path / name)["learner"]
    stock_dec = load_torch(stock_dir / "decoder.pt")
    plain, fresh = learners["plain"].decoder.state_dict(), learners["fresh"].decoder.state_dict()
    assert all(torch.equal(plain[k], stock_dec[k]) for k in stock_dec)  # v5: continues the stock's decoder
    assert not all(torch.equal(fresh[k], stock_dec[k]) for k in stock_dec)
    assert learners["plain"].aug is not None and not learners["plain"].norm_pix
    assert learners["npix"].aug is None and learners["npix"].norm_pix


def test_mae_knobs_are_rejected_on_other_algorithms():
    recipes = {k: r.model_dump() for k, r in SelfsoupConfig.for_profile("small").inter_train.recipes.items()}
    recipes["moco_t1"]["norm_pix"] = True
    with pytest.raises(ValueError, match="MAE knobs"):
        SelfsoupConfig.for_profile("small", {"inter_train": {"recipes": recipes}})
