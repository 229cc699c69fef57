"""calibrate_v8's barrier decomposition (heads vs encoders) on tiny random classifiers."""
import pytest
import torch

from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.soup import classifier
from components.selfsoup.ssl import build_encoder
from components.selfsoup.vit import Classifier
from tests.selfsoup.calibrate_v8 import decompose, heads_for, make_refit, split


def _setup():
    cfg = SelfsoupConfig.for_profile("small", {"seeds": [0]})
    g = torch.Generator().manual_seed(0)
    x = torch.rand(60, 1, 16, 16, generator=g)
    y = torch.arange(60) % cfg.model.num_classes
    models = []
    for s in (1, 2):
        torch.manual_seed(s)
        models.append({k: v.clone() for k, v in Classifier(build_encoder(cfg.model, 16), cfg.model.num_classes)
                       .state_dict().items()})
    net = classifier(cfg, 16, models[0])
    data = {"x": x, "y": y}
    return cfg, net, data, models


def test_a_model_with_itself_has_no_barrier_of_any_kind():
    cfg, net, data, (a, _) = _setup()
    d = decompose(cfg, net, data, data, a, a, make_refit(cfg, net, data, data))
    assert all(v == pytest.approx(0.0, abs=1e-6) for v in d.values()), d


def test_same_encoder_other_head_has_no_feature_barrier():
    """refit judges the encoders alone: two models that share the encoder have refit 0, whatever their heads."""
    cfg, net, data, (a, b) = _setup()
    enc, _ = split(a)
    _, head_b = split(b)
    d = decompose(cfg, net, data, data, a, enc | head_b, make_refit(cfg, net, data, data))
    assert d["refit"] == pytest.approx(0.0, abs=1e-6)
    assert d["head_a"] != pytest.approx(d["head_b"])  # the heads do differ


def test_shared_head_fix_gives_every_model_the_stock_probe():
    cfg, _, data, (a, b) = _setup()
    encoders = {n: {k.removeprefix("encoder."): v for k, v in split(s)[0].items()} for n, s in (("stock", a), ("x", b))}
    stock_head = {"weight": torch.ones(cfg.model.num_classes, cfg.model.dim), "bias": torch.zeros(cfg.model.num_classes)}
    heads = heads_for(cfg, {"head": "stock"}, encoders, stock_head, data)
    assert all(h is stock_head for h in heads.values())
    own = heads_for(cfg, {}, encoders, stock_head, data)
    assert own["stock"] is stock_head and not torch.equal(own["x"]["weight"], stock_head["weight"])
