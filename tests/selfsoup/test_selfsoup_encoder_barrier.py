"""v9: P2's encoder barrier (every model, ends and midpoint, scored with a probe refitted on its
own frozen features) and the soups' refitted head (soup.refit_head)."""
import pytest
import torch

from components.common.io import load_torch, read_json
from components.common.soups import interpolate, uniform_soup
from components.selfsoup.config import SelfsoupConfig
from components.selfsoup.finetune import own_probe_head
from components.selfsoup.soup import classifier, encoder_barrier, encoder_part, refit_head, refit_nll
from components.selfsoup.ssl import build_encoder
from components.selfsoup.vit import Classifier


def _setup():
    cfg = SelfsoupConfig.for_profile("small", {"seeds": [0]})
    g = torch.Generator().manual_seed(0)
    data = {"x": torch.rand(60, 1, 16, 16, generator=g), "y": torch.arange(60) % cfg.model.num_classes}
    models = []
    for s in (1, 2):
        torch.manual_seed(s)
        models.append({k: v.clone() for k, v in Classifier(build_encoder(cfg.model, 16), cfg.model.num_classes)
                       .state_dict().items()})
    return cfg, classifier(cfg, 16, models[0]), data, models


def test_identical_endpoints_have_no_encoder_barrier():
    cfg, net, data, (a, _) = _setup()
    assert encoder_barrier(cfg, net, a, a, data, data) == pytest.approx(0.0, abs=1e-6)


def test_interpolation_at_alpha_0_and_1_reproduces_the_endpoints():
    cfg, net, data, (a, b) = _setup()
    for alpha, end in ((0.0, a), (1.0, b)):
        assert refit_nll(cfg, net, interpolate(a, b, alpha), data, data) == pytest.approx(
            refit_nll(cfg, net, end, data, data), abs=1e-6)


def test_encoder_barrier_ignores_the_heads():
    cfg, net, data, (a, b) = _setup()
    other_heads = [encoder_part(s) | {"head.weight": torch.randn(10, cfg.model.dim), "head.bias": torch.randn(10)}
                   for s in (a, b)]
    assert encoder_barrier(cfg, net, a, b, data, data) == pytest.approx(
        encoder_barrier(cfg, net, *other_heads, data, data), abs=1e-6)


def test_refit_head_keeps_the_encoder_and_fits_the_own_probe():
    cfg, _, data, (a, _) = _setup()
    refit = refit_head(cfg, data, a)
    enc = encoder_part(a)
    assert refit.keys() == a.keys() and all(torch.equal(refit[k], enc[k]) for k in enc)
    probe = own_probe_head(cfg, data, {k.removeprefix("encoder."): v for k, v in enc.items()})
    assert torch.equal(refit["head.weight"], probe["weight"]) and torch.equal(refit["head.bias"], probe["bias"])
    assert not torch.equal(refit["head.weight"], a["head.weight"])


@pytest.mark.smoke
def test_soup_stage_refits_the_soup_head_and_reports_both_barriers(tmp_path):
    from flows.selfsoup import METHOD
    from tests.selfsoup.chain import run_chain

    cfg = SelfsoupConfig.for_profile("smoke", {"stock": {"steps": 5}, "inter_train": {"steps": 4},
                                               "robustness": {"steps": 4}, "finetune": {"epochs": 1}})
    summaries = run_chain(METHOD, cfg, tmp_path, only_until="soup")
    soup = load_torch(tmp_path / "soup" / "0" / "uniform_soup.pt")
    states = [load_torch(tmp_path / "fine_tune" / "0" / n / "model.pt") for n in cfg.inter_train.ingredients]
    train = load_torch(tmp_path / "prepare_data" / "out" / "splits.pt")["train"]
    expected = refit_head(cfg, train, uniform_soup(states))
    assert all(torch.equal(soup[k], expected[k]) for k in expected)
    assert not torch.equal(soup["head.weight"], uniform_soup(states)["head.weight"])  # not the averaged head
    js = read_json(tmp_path / "soup" / "0" / "soup.json")
    assert js["encoder_barriers"].keys() == js["barriers"].keys()
    assert summaries["soup/0"]["encoder_barrier_mean"] == pytest.approx(js["encoder_barriers"]["mae_lr1__moco_t0p1"])
