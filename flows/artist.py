"""artist — "Adaptive Time Series Reasoning via Segment Selection" (ARTIST, ICML 2026).
Six embedded task families with planted evidence; a tiny controller-reasoner policy trained by
SFT on synthesised traces, then hierarchical RL with the paper's rewards and advantages."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.artist"

METHOD = Method(
    name="artist",
    title="ARTIST: adaptive segment selection for time-series reasoning (controller-reasoner + RL)",
    paper="https://icml.cc/virtual/2026/poster/60563",
    config=f"{M}.config:ArtistConfig",
    stages=(
        Stage("generate_tasks", f"{M}.tasks:generate_tasks_stage", params=("data",),
              description="Six task families on AR / seasonal / random-walk / statsmodels backgrounds; "
                          "hidden evidence segments"),
        Stage("build_sft_traces", f"{M}.train:build_sft_traces_stage", params=("views", "traces"),
              deps=("generate_tasks",),
              description="Every candidate window (real and decoy, shuffled) then STOP; premise: "
                          "the coarse view points at the candidates (val)"),
        Stage("sft", f"{M}.train:sft_stage", params=("views", "model", "sft", "seeds"),
              deps=("generate_tasks", "build_sft_traces"), fan_out={"seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="Imitate the traces: controller CE on windows/STOP + reasoner CE on answers; "
                          "premise: reasoner accuracy on oracle windows (val)"),
        Stage("rl", f"{M}.train:rl_stage", params=("views", "model", "rl", "seeds"),
              deps=("generate_tasks", "sft"), fan_out={"seed": "seeds"}, resources=Resources(num_cpus=1),
              description="Hierarchical policy optimisation: consistency-rewarded controller (GRPO), "
                          "variance-guided reasoner groups, KL on the reasoner only"),
        Stage("train_static", f"{M}.train:train_static_stage",
              params=("views", "model", "sft", "baselines", "seeds"), deps=("generate_tasks",),
              fan_out={"variant": "baselines.static_variants", "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="Static full-series reasoner at the per-view (and total) budget"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("views", "model", "baselines", "evaluate", "seeds"),
              deps=("generate_tasks", "sft", "rl", "train_static"), fan_out={"seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="Accuracy, macro-F1, fraction read, rounds per family; random / oracle "
                          "controllers, stats+GBM, uniform guess"),
        Stage("report", f"{M}.report:report_stage", params=("data",),
              deps=("evaluate", "sft", "build_sft_traces"),
              description="CLAIMS.md premises and criteria over seeds, table, plot"),
    ),
)
