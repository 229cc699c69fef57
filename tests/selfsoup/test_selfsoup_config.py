"""Profiles validate; inconsistent ingredient names and missing paper inputs fail early."""
import pytest
from pydantic import ValidationError

from components.selfsoup.config import SelfsoupConfig


@pytest.mark.parametrize("profile", ["smoke", "small", "paper"])
def test_profiles_validate(profile):
    cfg = SelfsoupConfig.for_profile(profile)
    assert set(cfg.robustness.ingredients) <= set(cfg.inter_train.ingredients)


def test_small_has_the_seeds_and_ingredients_the_claims_need():
    cfg = SelfsoupConfig.for_profile("small")
    assert cfg.seeds == [15, 16, 17]       # v10: fresh seeds (v2 ran 0-2, v3 3-5, v4 6-8, v5 9-11, v9 12-14, dev 100-108)
    assert {cfg.inter_train.recipes[n].algo for n in cfg.inter_train.ingredients} == {"mae", "moco", "mmcr", "lejepa"}
    assert {"stock", "selfsoup_shift", "selfsoup_clean"} <= set(cfg.finetune.models)


def test_paper_keeps_the_official_grid_the_small_profile_trims():
    small, paper = SelfsoupConfig.for_profile("small"), SelfsoupConfig.for_profile("paper")
    assert "mmcr_local" not in small.inter_train.ingredients       # collapses at this scale (CLAIMS.md)
    assert len(paper.inter_train.ingredients) == 7 and "mmcr_local" in paper.finetune.models
    assert "lejepa" in paper.robustness.ingredients and "lejepa" not in small.robustness.ingredients  # v4 budget


def test_unknown_ingredient_is_rejected():
    with pytest.raises(ValidationError, match="no entry in inter_train.recipes"):
        SelfsoupConfig.for_profile("small", {"inter_train": {"ingredients": ["nope"]}})


def test_paper_preflight_names_the_missing_key():
    with pytest.raises(FileNotFoundError, match="data.root"):
        SelfsoupConfig.for_profile("paper").preflight()
    SelfsoupConfig.for_profile("small").preflight()
