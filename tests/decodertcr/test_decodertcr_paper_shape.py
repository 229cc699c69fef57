"""decodertcr's paper profile end to end (DVC + Prefect + MLflow) on a tiny random ESM-2 built
from EsmConfig and generated tables in VDJdb / AIRR / ligand layout; steps shrunk by --set."""
import math

import pytest

from components.common.io import read_table
from tests.decodertcr.tables_layout import write_tables
from tests.paper.harness import run_paper_shape

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]   # ~100 s on 2 cores (CI time)

VARIANTS = ("curriculum", "paired_only", "marginal_only", "backbone_only")
SHRINK = [
    "seeds=[0]", "paper.device=cpu", f"train.variants=[{','.join(VARIANTS)}]",
    "train.binders_per_epitope=[5]", "train.marginal_steps=3", "train.paired_steps=2",
    "train.batch_size=8", "train.warmup=1", "train.lr=0.001",
    "data.n_marginal_tcr=150", "data.n_marginal_pep=100", "data.n_heldout_epitopes=1",
    "generate.n_epitopes=2", "generate.templates_per_epitope=2", "generate.gibbs_rounds=1",
    "generate.n_pgen=4", "generate.n_pgen_real=10",
]


def test_decodertcr_paper_profile_on_tiny_esm_and_vdjdb_layout(tmp_path, tiny_checkpoints):
    root = write_tables(tmp_path / "tables")
    sets = SHRINK + [f"paper.data_root={root}", f"paper.backbone={tiny_checkpoints.checkpoint('esm')}"]
    result = run_paper_shape("decodertcr", tmp_path / "project", sets)

    marginal = result.metrics("decodertcr", "build_marginal")
    assert marginal["n_tcr"] == 150 and marginal["n_background_tcr"] == 150 and marginal["n_pep"] == 100
    paired = result.metrics("decodertcr", "build_paired")
    assert paired["n_epitopes"] == 5 and paired["n_positive"] == 45      # the 5 filtered rows are gone
    assert paired["n_train"] > 0 and paired["n_test_tcr"] > 0 and paired["n_test_epitope"] > 0
    pairs = read_table(result.out("decodertcr", "build_paired") / "paired.parquet").to_pandas()
    assert set(pairs["kind"]) == {"positive", "swapped", "background"}

    disc = result.metrics("decodertcr", "evaluate_discrimination")
    for variant in VARIANTS:
        for split in ("test_tcr", "test_epitope", "val"):
            assert 0.0 <= disc[f"{split}/{variant}/b5/macro_auroc"] <= 1.0
    per_epitope = read_table(result.out("decodertcr", "evaluate_discrimination") / "per_epitope.parquet").to_pandas()
    test_tcr = per_epitope[(per_epitope["split"] == "test_tcr") & (per_epitope["variant"] == "curriculum")]
    assert 1 <= len(test_tcr) <= 4 and test_tcr["auroc"].between(0, 1).all()

    gen = result.metrics("decodertcr", "evaluate_generation")
    for method in ("iegr", "one_shot", "left_to_right"):
        assert math.isfinite(gen[f"{method}/model_pll"]) and gen[f"{method}/model_pll"] < 0
        assert math.isnan(gen[f"{method}/energy_percentile"])          # no oracle for real tables
    assert math.isfinite(gen["real/log10_pgen"])
    report = result.metrics("decodertcr", "report")
    assert report["criteria_gated"] == 1           # C1 at the one cap; no oracle, so C2 is reported only
    assert math.isfinite(report["c1_b5/gain"]) and "c2/pass" not in report
    assert math.isfinite(report["c2/model_pll_gain"]) and math.isnan(report["c2/energy_percentile_gain"])
