"""Params of the decodertcr reproduction. Defaults are the ``small`` profile."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from components.common.config import MethodConfig, Section


class Data(Section):
    """Marginal (unpaired) and paired synthetic corpora (planted specificity)."""
    seed: int = 7                      # data seed, fixed across model seeds
    n_marginal_tcr: int = 20_000       # unpaired CDR3beta from OLGA's human TRB model
    n_marginal_pep: int = 5_000        # unpaired 9-mers from the anchor motif
    n_pool_tcr: int = 12_000           # OLGA TCRs from which paired positives are planted
    n_epitopes: int = 12
    n_heldout_epitopes: int = 2        # epitope-held-out split
    positives_per_epitope: int = 60
    binder_quantile: float = 0.98      # energy quantile (per epitope, over the pool) of a binder
    heldout_tcr_fraction: float = 0.2  # TCR-held-out split
    val_tcr_fraction: float = 0.1      # used only to calibrate the planted signal
    random_test_fraction: float = 0.1  # random pair split
    contacts: int = 10                 # non-zero entries of the hidden contact map (5 x 5)
    intra_pairs: int = 5               # non-zero CDR3-middle x CDR3-middle couplings (of 10)
    intra_scale: float = 1.0           # their size relative to the contacts
    marginal_tilt: float = 2.0         # beta of the BLOSUM-compatibility tilt of marginal data
    marginal_oversample: int = 3       # candidates drawn per kept marginal sequence
    cdr3_min_len: int = 10
    cdr3_max_len: int = 18
    noise_grid: list[float] = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5]  # label noise sigma candidates
    target_supervised_auroc: float = 0.85


class Model(Section):
    d_model: int = 48
    n_layers: int = 2
    n_heads: int = 4
    dropout: float = 0.0


class Train(Section):
    # curriculum = S1 then S2; paired_only = S2 steps only (matched paired steps);
    # paired_only_total = S1 + S2 steps on paired data (equal total steps); mixed = shuffled
    # mixture at equal total steps; marginal_only = the S1 model, no paired data
    variants: list[str] = ["curriculum", "paired_only", "paired_only_total", "marginal_only"]
    binders_per_epitope: list[int] = [10, 30]   # sweep: cap on training binders per epitope
    marginal_steps: int = 600          # S1
    paired_steps: int = 400            # S2
    batch_size: int = 64
    lr: float = 2e-3
    warmup: int = 50
    mask_rate: float = 0.15            # per-position Bernoulli rate (peptide and CDR3 regions)
    segment_prob: float = 0.5          # else: mask one whole segment (peptide or CDR3)


class Generate(Section):
    n_epitopes: int = 4                # seen epitopes to design CDR3s for
    templates_per_epitope: int = 16    # unseen background TCRs whose middle is redesigned
    keep_ends: int = 3                 # germline-encoded residues kept on each side
    methods: list[str] = ["iegr", "one_shot", "left_to_right"]
    temperature: float = 0.1
    gibbs_rounds: int = 2              # IEGR phase 2 (per design: rounds x region length steps)
    gibbs_subset: int = 5
    n_pgen: int = 48                   # designs per method and seed scored with OLGA Pgen
    n_pgen_real: int = 100


class Claims(Section):
    min_marginal_only_val_auroc: float = 0.55
    min_greedy_suboptimal_fraction: float = 0.5
    min_auroc_gain: float = 0.03
    min_curriculum_auroc: float = 0.65
    min_energy_percentile_gain: float = 5.0
    max_log10_pgen_gap: float = 2.0


class Paper(Section):
    """Paper-scale inputs (ESM backbone, VDJdb/IEDB tables) supplied by the user."""
    data_root: str = ""
    backbone: str = ""


class DecodertcrConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    data: Data = Data()
    model: Model = Model()
    train: Train = Train()
    generate: Generate = Generate()
    claims: Claims = Claims()
    paper: Paper = Paper()

    SMOKE: ClassVar[dict] = {
        "seeds": [0],
        "data": {"n_marginal_tcr": 2000, "n_marginal_pep": 500, "n_pool_tcr": 2000,
                 "n_epitopes": 4, "n_heldout_epitopes": 1, "positives_per_epitope": 20,
                 "binder_quantile": 0.95, "noise_grid": [0.0, 1.0]},
        "model": {"d_model": 32, "n_layers": 2},
        "train": {"variants": ["curriculum", "paired_only", "marginal_only"],
                  "binders_per_epitope": [10], "marginal_steps": 60,
                  "paired_steps": 40, "batch_size": 32},
        "generate": {"n_epitopes": 2, "templates_per_epitope": 3, "gibbs_rounds": 1,
                     "n_pgen": 4, "n_pgen_real": 4},
    }
    PAPER: ClassVar[dict] = {
        "paper": {"data_root": "data/decodertcr/paper", "backbone": "esmc_600m"},
    }

    def preflight(self) -> None:
        if self.paper.data_root and not Path(self.paper.data_root).is_dir():
            raise FileNotFoundError(
                f"paper profile: VDJdb/IEDB tables not found at {self.paper.data_root!r}; "
                "set paper.data_root to a folder with paired.csv, marginal_tcr.csv, peptides.csv "
                "(and paper.backbone to a local ESM checkpoint)")
        if self.paper.data_root:
            raise NotImplementedError(
                "paper profile: the ESM-backbone pipeline is not implemented in this repro; "
                "only the synthetic smoke/small profiles run")
