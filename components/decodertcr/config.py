"""Params of the decodertcr reproduction. Defaults are the ``small`` profile."""
from __future__ import annotations

from typing import ClassVar

from components.common.config import MethodConfig, Section


class Data(Section):
    """Marginal (unpaired) and paired synthetic corpora (planted specificity)."""
    seed: int = 11                     # data seed, fixed across model seeds (v2: 7; dev: 107)
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
    marginal_tilt: float = 4.0         # beta of the BLOSUM-compatibility tilt of marginal data
    marginal_oversample: int = 10      # candidates drawn per kept marginal sequence
    marginal_tcr_score: str = "dense"  # what tilts marginal CDR3s: dense (all middle pairs) |
                                       # intra (the oracle's five CDR3-CDR3 terms, v2)
    cdr3_min_len: int = 10
    cdr3_max_len: int = 18
    noise_grid: list[float] = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5]  # label noise sigma candidates
    target_supervised_auroc: float = 0.85


class Model(Section):
    family: str = "esm"                # esm: a small transformers EsmForMaskedLM (rotary, the
                                       # paper's family); torch: TransformerEncoder (v1, v2)
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
    """Paper-scale inputs supplied by the user (nothing is downloaded). ``source = synthetic``
    is the planted-specificity world of smoke/small; ``tables`` reads published tables under
    ``data_root`` (see TABLES_LAYOUT) and continues an ESM-2 ``EsmForMaskedLM`` checkpoint."""
    source: str = "synthetic"          # synthetic | tables
    data_root: str = ""                # tables: folder in TABLES_LAYOUT
    backbone: str = ""                 # tables: ESM-2 save_pretrained folder (EsmForMaskedLM)
    device: str = "cpu"                # "auto": CUDA when visible (bf16 autocast), else CPU
    species: str = "HomoSapiens"       # VDJdb rows kept (species column)
    min_vdjdb_score: int = 0           # VDJdb confidence score 0..3
    min_binders: int = 5               # epitopes with fewer unique CDR3beta binders are dropped
    max_epitopes: int = 0              # most-populated epitopes kept (0: all)
    max_peptide_len: int = 15          # longer epitopes / ligands are dropped (class I: 8-11)


class DecodertcrConfig(MethodConfig):
    seeds: list[int] = [3, 4, 5]       # v1/v2 ran 0-2; dev calibration used 0-2 on data seed 107
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
        # ESM-2 650M continued on published tables; step counts and lr are our choice (the
        # notes found none): about 2 epochs of 500k repertoire CDR3s + ligands in S1.
        "seeds": [0],
        "data": {"n_marginal_tcr": 500_000, "n_marginal_pep": 200_000, "n_heldout_epitopes": 5,
                 "cdr3_min_len": 9, "cdr3_max_len": 22},
        "train": {"variants": ["curriculum", "paired_only", "marginal_only", "backbone_only"],
                  "binders_per_epitope": [10, 1000], "marginal_steps": 20_000,
                  "paired_steps": 5_000, "batch_size": 64, "lr": 3e-5, "warmup": 500},
        "generate": {"n_epitopes": 10, "templates_per_epitope": 20, "gibbs_rounds": 10,
                     "n_pgen": 200, "n_pgen_real": 1000},
        "paper": {"source": "tables", "device": "auto"},
    }

    def preflight(self) -> None:
        if self.paper.source == "synthetic":
            if self.paper.data_root or self.paper.backbone:
                raise ValueError("paper.data_root / paper.backbone are set but paper.source is "
                                 "synthetic: set paper.source=tables to use them")
            return
        if self.paper.source != "tables":
            raise ValueError(f"paper.source must be synthetic or tables (got {self.paper.source!r})")
        from components.decodertcr.tables import check_tables

        check_tables(self.paper)
