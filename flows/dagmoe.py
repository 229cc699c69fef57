"""dagmoe — "DAG-MoE: From Simple Mixture to Structural Aggregation in Mixture-of-Experts" (ICML 2026).

Small decoder LMs on Python stdlib docstrings: DAG-MoE vs a parameter-matched shared-expert MoE,
paired over seeds; validation loss in-domain (held-out modules) and out-of-domain (language reference).
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.dagmoe"

METHOD = Method(
    name="dagmoe",
    title="DAG-MoE: structural aggregation of the selected experts",
    paper="https://arxiv.org/abs/2606.01062",
    config=f"{M}.config:DagmoeConfig",
    stages=(
        Stage("build_corpus", f"{M}.corpus:build_corpus_stage", params=("corpus",),
              description="Stdlib docstrings (held-out modules) + language reference; local BPE"),
        Stage("train", f"{M}.train:train_stage", params=("model", "train", "seeds"),
              deps=("build_corpus",),
              fan_out={"variant": "train.variants", "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="One decoder LM per variant x seed (same batches per seed)"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("eval",),
              deps=("build_corpus", "train"),
              description="Validation loss / perplexity in-domain and out-of-domain"),
        Stage("analyze_routing", f"{M}.evaluate:analyze_routing_stage", params=("eval",),
              deps=("build_corpus", "train"),
              description="Expert load, DAG edge-gate statistics, throughput overhead"),
        Stage("compare", f"{M}.compare:compare_stage", params=("claims", "seeds"),
              deps=("evaluate", "analyze_routing"),
              description="Paired seed differences and the pass criteria of CLAIMS.md"),
    ),
)
