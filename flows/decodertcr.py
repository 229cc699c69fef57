"""decodertcr — "DecoderTCR: Compositional Pretraining and Entropy-Guided Decoding for TCR-pMHC
Interactions" (ICML 2026).

Synthetic planted-specificity TCR-epitope data (OLGA CDR3beta, anchor-motif peptides, hidden
and CDR3-CDR3 energy over standardised BLOSUM62); small masked-LM encoder; curriculum vs
paired-only at matched paired and at equal total steps, swept over binders per epitope; IEGR vs
one-shot vs left-to-right decoding.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.decodertcr"

METHOD = Method(
    name="decodertcr",
    title="DecoderTCR: compositional MLM curriculum and entropy-guided decoding",
    paper="https://icml.cc/virtual/2026/poster/60562",
    config=f"{M}.config:DecodertcrConfig",
    stages=(
        Stage("build_marginal", f"{M}.corpus:build_marginal_stage", params=("data",),
              description="Unpaired CDR3beta (OLGA human TRB) and anchor-motif peptides"),
        Stage("build_paired", f"{M}.corpus:build_paired_stage", params=("data",),
              deps=("build_marginal",),
              description="Planted specificity, negatives, splits; signal calibrated on val"),
        Stage("tokenize", f"{M}.train:tokenize_stage", params=("train",),
              deps=("build_marginal", "build_paired"),
              description="<cls> peptide <sep> CDR3 <eos> token and region ids per split"),
        Stage("pretrain_marginal", f"{M}.train:pretrain_marginal_stage",
              params=("model", "train", "seeds"), deps=("tokenize",),
              fan_out={"seed": "seeds"}, resources=Resources(num_cpus=1),
              description="S1: masked LM on single components"),
        Stage("train_paired", f"{M}.train:train_paired_stage",
              params=("model", "train", "seeds"), deps=("tokenize", "pretrain_marginal"),
              fan_out={"variant": "train.variants", "binders": "train.binders_per_epitope",
                       "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="S2 per variant and binder cap (matched paired / equal total steps)"),
        Stage("score", f"{M}.evaluate:score_stage", params=("model", "train", "seeds"),
              deps=("tokenize", "build_paired", "train_paired"),
              fan_out={"variant": "train.variants", "binders": "train.binders_per_epitope",
                       "seed": "seeds"},
              description="Masked-peptide pseudo-log-likelihood of every evaluation pair"),
        Stage("evaluate_discrimination", f"{M}.evaluate:evaluate_discrimination_stage",
              deps=("score",), description="Per-epitope and macro AUROC, AUPRC per split"),
        Stage("generate", f"{M}.evaluate:generate_stage",
              params=("model", "train", "generate", "data", "seeds"),
              deps=("build_paired", "train_paired"), fan_out={"seed": "seeds"},
              description="CDR3 designs with IEGR, one-shot and left-to-right decoding"),
        Stage("evaluate_generation", f"{M}.evaluate:evaluate_generation_stage",
              params=("generate",), deps=("build_paired", "generate"),
              description="Oracle energy, model PLL, hit rate, OLGA Pgen realism"),
        Stage("report", f"{M}.evaluate:report_stage", params=("claims",),
              deps=("evaluate_discrimination", "evaluate_generation"),
              description="Pass criteria of CLAIMS.md and the prediction-generation gap"),
    ),
)
