"""v10: the a-claims (a1, a2, b) and r2 compare the soups (refitted heads) against the ingredients
scored with refitted heads too ("<ingredient>_refit" rows), not their own fine-tuned heads."""
import pytest

from components.selfsoup.evaluate import REFIT, cross_algorithm_soup


def test_a_claims_read_the_refitted_head_ingredient_rows():
    acc = {"x": [60.0, 62.0], "y": [50.0, 70.0],                     # own LP-FT heads
           "x" + REFIT: [80.0, 82.0], "y" + REFIT: [75.0, 85.0],     # refitted heads
           "uniform_soup": [79.0, 80.0], "greedy_soup": [81.0, 86.0]}
    a = cross_algorithm_soup(acc, ["x", "y"])
    assert a["mean_ingredient"] == pytest.approx((80 + 82 + 75 + 85) / 4)
    assert a["best_ingredient"] == pytest.approx((80 + 85) / 2)
    assert a["soup_minus_best_ingredient"]["mean"] == pytest.approx(((79 - 80) + (80 - 85)) / 2)
    assert a["soup_minus_mean_ingredient"]["mean"] == pytest.approx(((79 - 77.5) + (80 - 83.5)) / 2)
    assert a["greedy_minus_best_ingredient"]["mean"] == pytest.approx(((81 - 80) + (86 - 85)) / 2)
    assert not a["beats_best_every_seed"]
    # v9's comparison (own heads) is still available, and differs
    own = cross_algorithm_soup(acc, ["x", "y"], suffix="")
    assert own["best_ingredient"] == pytest.approx((60 + 70) / 2)


def test_a_claims_fail_loudly_without_the_refit_rows():
    with pytest.raises(KeyError):
        cross_algorithm_soup({"x": [1.0], "uniform_soup": [1.0], "greedy_soup": [1.0]}, ["x"])


def test_heads_are_refitted_only_under_own_probe_lp_ft():
    """The paper's recipe (finetune.probe false: one shared head init) soups the heads as they are;
    only the small profile's own-probe LP-FT refits them (a bug fix: v9/v10 refitted in every profile)."""
    import torch

    from components.selfsoup.config import SelfsoupConfig
    from components.selfsoup.soup import soup_head

    paper = SelfsoupConfig.for_profile("paper")
    assert not paper.finetune.probe
    state = {"encoder.w": torch.ones(2), "head.weight": torch.zeros(3, 2)}
    assert soup_head(paper, train={}, arch=None)(state) is state
    assert SelfsoupConfig.for_profile("small").finetune.probe  # small: soup_head refits (tests above)
