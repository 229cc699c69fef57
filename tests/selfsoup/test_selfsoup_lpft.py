"""v5 LP-FT: every fine-tune starts from a linear probe of the model's own frozen features."""
import numpy as np
import torch

from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.finetune import head_init, own_probe_head
from components.selfsoup.ssl import linear_probe_head
from components.selfsoup.vit import Encoder, embed


def _data(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.rand(n, 1, 16, 16, generator=g), "y": torch.arange(n) % 10}


def _encoder_state(seed, dim=32):
    torch.manual_seed(seed)
    return Encoder(16, 4, dim, 2, 2).state_dict()


def test_own_probe_is_the_stock_probe_recipe_on_the_model_features():
    cfg = SelfsoupConfig.for_profile("small")
    train, state = _data(), _encoder_state(1)
    enc = Encoder(16, 4, 32, 2, 2)
    enc.load_state_dict(state)
    ref = linear_probe_head(embed(enc, train["x"]).numpy(), train["y"].numpy(), 1.0, 10)
    head = own_probe_head(cfg, train, state)
    for k in ref:
        torch.testing.assert_close(head[k], ref[k])


def test_head_init_follows_finetune_probe(tmp_path):
    """LP-FT on: the head is the model's own probe (for the stock: its head_init, the same
    probe of the same features); off (paper profile): the stock's probe for every model."""
    train, stock_state, other = _data(), _encoder_state(1), _encoder_state(2)
    enc = Encoder(16, 4, 32, 2, 2)
    enc.load_state_dict(stock_state)
    stock_head = linear_probe_head(embed(enc, train["x"]).numpy(), train["y"].numpy(), 1.0, 10)
    torch.save(stock_head, tmp_path / "head_init.pt")
    on = SelfsoupConfig.for_profile("small", {"finetune": {"probe": True}})
    off = SelfsoupConfig.for_profile("small", {"finetune": {"probe": False}})
    for k in stock_head:
        torch.testing.assert_close(head_init(on, train, stock_state, tmp_path)[k], stock_head[k])
        torch.testing.assert_close(head_init(off, train, other, tmp_path)[k], stock_head[k])
    assert not np.allclose(head_init(on, train, other, tmp_path)["weight"].numpy(), stock_head["weight"].numpy())


def test_small_uses_lpft_and_paper_keeps_the_official_head():
    assert SelfsoupConfig.for_profile("small").finetune.probe
    assert not SelfsoupConfig.for_profile("paper").finetune.probe


def test_encoder_distance_leaves_the_head_out():
    from components.selfsoup.soup import encoder_part, weight_distance

    a = {"encoder.w": torch.zeros(3), "head.weight": torch.zeros(2)}
    b = {"encoder.w": torch.tensor([3.0, 4.0, 0.0]), "head.weight": torch.tensor([100.0, 0.0])}
    assert encoder_part(b).keys() == {"encoder.w"}
    assert weight_distance(encoder_part(a), encoder_part(b)) == 5.0


def test_the_stock_probe_is_read_not_refitted_under_lpft(tmp_path, monkeypatch):
    """v6 fix: under LP-FT the stock's head is its head_init.pt (pretrain_stock's probe); v5 fitted
    the same probe a second time in fine_tune."""
    from components.selfsoup import finetune

    sentinel = {"weight": torch.full((10, 32), 7.0), "bias": torch.zeros(10)}
    torch.save(sentinel, tmp_path / "head_init.pt")
    calls = []
    monkeypatch.setattr(finetune, "own_probe_head", lambda *a, **k: calls.append(1) or sentinel)
    cfg = SelfsoupConfig.for_profile("small")
    head = finetune.head_init(cfg, _data(), _encoder_state(1), tmp_path, is_stock=True)
    torch.testing.assert_close(head["weight"], sentinel["weight"])
    assert not calls
    finetune.head_init(cfg, _data(), _encoder_state(2), tmp_path)  # an ingredient: its own probe
    assert calls == [1]


def test_lpft_requires_the_stock_probe_recipe():
    import pytest

    with pytest.raises(ValueError, match="probe_c"):
        SelfsoupConfig.for_profile("small", {"finetune": {"probe_c": 0.5}})
    SelfsoupConfig.for_profile("small", {"finetune": {"probe": False, "probe_c": 0.5}})
