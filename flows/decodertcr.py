"""decodertcr — "DecoderTCR: Compositional Pretraining and Entropy-Guided Decoding for TCR-pMHC
Interactions" (ICML 2026).

Synthetic planted-specificity TCR-epitope data (OLGA CDR3beta, anchor-motif peptides, hidden
and CDR3-CDR3 energy over standardised BLOSUM62; marginal chains tilted by the same residue
rule); a small ESM-2 masked LM trained from scratch; curriculum vs
paired-only at matched paired and at equal total steps, swept over binders per epitope; IEGR vs
one-shot vs left-to-right decoding. The paper profile runs the same stages on published tables
(VDJdb pairs, AIRR repertoires, peptide ligands) with an ESM-2 checkpoint as the masked LM.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.decodertcr"
# ESM-2 training, scoring and decoding want a GPU at paper scale; none in smoke/small
GPU = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="decodertcr",
    title="DecoderTCR: compositional MLM curriculum and entropy-guided decoding",
    paper="https://icml.cc/virtual/2026/poster/60562",
    config=f"{M}.config:DecodertcrConfig",
    stages=(
        Stage("build_marginal", f"{M}.corpus:build_marginal_stage", params=("data", "paper"),
              description="Unpaired CDR3beta (OLGA human TRB) and anchor-motif peptides"),
        Stage("build_paired", f"{M}.corpus:build_paired_stage", params=("data", "paper"),
              deps=("build_marginal",),
              description="Planted specificity, negatives, splits; signal calibrated on val"),
        Stage("tokenize", f"{M}.train:tokenize_stage", params=("train", "data", "paper"),
              deps=("build_marginal", "build_paired"),
              description="<cls> peptide <sep> CDR3 <eos> token and region ids per split"),
        Stage("pretrain_marginal", f"{M}.train:pretrain_marginal_stage",
              params=("model", "train", "paper", "seeds"), deps=("tokenize",),
              fan_out={"seed": "seeds"}, resources=GPU,
              description="S1: masked LM on single components"),
        Stage("train_paired", f"{M}.train:train_paired_stage",
              params=("model", "train", "paper", "seeds"), deps=("tokenize", "pretrain_marginal"),
              fan_out={"variant": "train.variants", "binders": "train.binders_per_epitope",
                       "seed": "seeds"},
              resources=GPU,
              description="S2 per variant and binder cap (matched paired / equal total steps)"),
        Stage("score", f"{M}.evaluate:score_stage", params=("model", "train", "paper", "seeds"),
              deps=("tokenize", "build_paired", "train_paired"),
              fan_out={"seed": "seeds"}, resources=GPU,
              description="Masked-peptide pseudo-log-likelihood of every evaluation pair, "
                          "all models of a seed"),
        Stage("evaluate_discrimination", f"{M}.evaluate:evaluate_discrimination_stage",
              deps=("score",), description="Per-epitope and macro AUROC, AUPRC per split"),
        Stage("generate", f"{M}.evaluate:generate_stage",
              params=("model", "train", "generate", "data", "paper", "seeds"),
              deps=("build_paired", "train_paired"), fan_out={"seed": "seeds"}, resources=GPU,
              description="CDR3 designs with IEGR, one-shot and left-to-right decoding"),
        Stage("evaluate_generation", f"{M}.evaluate:evaluate_generation_stage",
              params=("generate",), deps=("build_paired", "generate"),
              description="Oracle energy, model PLL, hit rate, OLGA Pgen realism"),
        Stage("report", f"{M}.evaluate:report_stage", params=("claims",),
              deps=("evaluate_discrimination", "evaluate_generation"),
              description="Pass criteria of CLAIMS.md and the prediction-generation gap"),
    ),
)
