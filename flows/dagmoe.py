"""dagmoe — "DAG-MoE: From Simple Mixture to Structural Aggregation in Mixture-of-Experts" (ICML 2026).

Small decoder LMs on Python stdlib docstrings: DAG-MoE vs a parameter-matched shared-expert MoE,
paired over seeds; validation loss in-domain (held-out modules) and out-of-domain (language reference).
The paper profile runs the same stages on The Pile (train + in-domain eval) and Wikipedia,
FineWeb-Edu and C4 (out-of-domain eval) from local shards, data-parallel over 8 GPUs per run.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.dagmoe"
# Paper profile: each training run takes a node's 8 GPUs (train.world_size=0 starts one DDP
# replica per GPU the runtime made visible); evaluation and routing analysis take one GPU.
TRAIN_RESOURCES = Resources(num_cpus=1, num_gpus={"paper": 8})
EVAL_RESOURCES = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="dagmoe",
    title="DAG-MoE: structural aggregation of the selected experts",
    paper="https://arxiv.org/abs/2606.01062",
    config=f"{M}.config:DagmoeConfig",
    stages=(
        Stage("build_corpus", f"{M}.corpus:build_corpus_stage", params=("corpus", "paper"),
              description="Stdlib docstrings (held-out modules) + language reference; local BPE "
                          "(paper: Pile / Wikipedia / FineWeb-Edu / C4 shards, local tokenizer)"),
        Stage("train", f"{M}.train:train_stage", params=("model", "train", "seeds"),
              deps=("build_corpus",),
              fan_out={"variant": "train.variants", "seed": "seeds"},
              resources=TRAIN_RESOURCES,
              description="One decoder LM per variant x seed (same batches per seed)"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("eval",),
              deps=("build_corpus", "train"), resources=EVAL_RESOURCES,
              description="Validation loss / perplexity per eval set, in-domain and out-of-domain"),
        Stage("analyze_routing", f"{M}.evaluate:analyze_routing_stage", params=("eval",),
              deps=("build_corpus", "train"), resources=EVAL_RESOURCES,
              description="Expert load, DAG edge-gate statistics, throughput overhead"),
        Stage("compare", f"{M}.compare:compare_stage", params=("claims", "seeds"),
              deps=("evaluate", "analyze_routing"),
              description="Paired seed differences and the pass criteria of CLAIMS.md"),
    ),
)
