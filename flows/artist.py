"""artist — "Adaptive Time Series Reasoning via Segment Selection" (ARTIST, ICML 2026).
Six embedded task families with planted evidence; a tiny controller-reasoner policy trained by
SFT on synthesised traces, then hierarchical RL with the paper's rewards and advantages."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.artist"
# the policy stages take one GPU in the paper profile (Qwen3-4B; none in smoke/small)
POLICY = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="artist",
    title="ARTIST: adaptive segment selection for time-series reasoning (controller-reasoner + RL)",
    paper="https://icml.cc/virtual/2026/poster/60563",
    config=f"{M}.config:ArtistConfig",
    stages=(
        Stage("generate_tasks", f"{M}.tasks:generate_tasks_stage", params=("data", "paper"),
              description="Six task families on AR / seasonal / random-walk / statsmodels backgrounds; "
                          "hidden evidence segments"),
        Stage("build_sft_traces", f"{M}.train:build_sft_traces_stage", params=("views", "traces", "lm", "paper"),
              deps=("generate_tasks",),
              description="Every candidate window (real and decoy, shuffled) then STOP; premise: "
                          "the coarse view points at the candidates (val)"),
        Stage("sft", f"{M}.train:sft_stage", params=("views", "model", "sft", "seeds", "lm", "paper"),
              deps=("generate_tasks", "build_sft_traces"), fan_out={"seed": "seeds"}, resources=POLICY,
              description="Imitate the traces: controller CE on windows/STOP + reasoner CE on answers; "
                          "premise: reasoner accuracy on oracle windows (val)"),
        Stage("rl", f"{M}.train:rl_stage", params=("views", "model", "rl", "seeds", "lm", "paper"),
              deps=("generate_tasks", "sft"), item_deps=("sft",), fan_out={"seed": "seeds"}, resources=POLICY,
              description="Hierarchical policy optimisation: consistency-rewarded controller (GRPO), "
                          "variance-guided reasoner groups, KL on the reasoner only"),
        Stage("train_static", f"{M}.train:train_static_stage",
              params=("views", "model", "sft", "baselines", "seeds", "lm"), deps=("generate_tasks",),
              fan_out={"variant": "baselines.static_variants", "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="Static full-series reasoner at the per-view (and total) budget"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("views", "model", "baselines", "evaluate", "seeds", "lm", "paper"),
              deps=("generate_tasks", "sft", "rl", "train_static"), item_deps=("sft", "rl"),
              fan_out={"seed": "seeds"}, resources=POLICY,
              description="Accuracy, macro-F1, fraction read, rounds per family; random / oracle "
                          "controllers, stats+GBM, uniform guess"),
        Stage("report", f"{M}.report:report_stage", params=("data", "paper"),
              deps=("evaluate", "sft", "build_sft_traces"),
              description="CLAIMS.md premises and criteria over seeds, table, plot"),
    ),
)
