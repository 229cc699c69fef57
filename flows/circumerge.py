"""circumerge — "Sketch-Based Low-Rank Model Merging with Shared Circulant Transforms" (ICML 2026).

CircuMerge (our instantiation): only the abstract is public, so the algorithm is our sketched
Core Space (components/circumerge/sketch.py). Baselines: full-space and Core Space merging.
Small: LoRA adapters on MiniLM's upper layers, synthetic text tasks. Paper: peft LoRA adapters
on a CLIP vision encoder (ViT-B/32, ViT-L/14) over 8 image tasks, from local folders; same stages.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.circumerge"
# the CLIP encoder runs in these stages at paper scale (features, adapter training, merged-model
# evaluation); none in smoke/small
GPU = Resources(num_cpus=1, num_gpus={"paper": 1})
# tune_alpha and evaluate each run alone in the DAG (only forward passes): both cores, not one;
# in the small profile they spread their merges over one single-threaded process per core
# (components/circumerge/evaluate.score_merges)
GPU_2CPU = Resources(num_cpus=2, num_gpus={"paper": 1})

METHOD = Method(
    name="circumerge",
    title="CircuMerge (our instantiation): LoRA merging on circulant-transform sketches",
    paper="https://icml.cc/virtual/2026/poster/60572",
    config=f"{M}.config:CircumergeConfig",
    stages=(
        Stage("prepare_tasks", f"{M}.tasks:prepare_tasks_stage", params=("data", "model", "paper"),
              resources=GPU,
              description="Task splits, cached frozen lower layers, zero-shot heads"),
        Stage("train_adapters", f"{M}.adapters:train_adapters_stage",
              params=("data", "model", "train"), deps=("prepare_tasks",),
              fan_out={"task": "data.tasks"}, resources=GPU,
              description="One LoRA adapter per task (frozen head), individual accuracies"),
        Stage("merge", f"{M}.merge:merge_stage", params=("data", "merge", "seeds"),
              deps=("train_adapters",),
              description="{TA, TIES, TSV} x {full, Core Space, CircuMerge}; merge time, effective rank"),
        Stage("tune_alpha", f"{M}.evaluate:tune_alpha_stage", params=("data", "tune"),
              deps=("prepare_tasks", "train_adapters", "merge"), resources=GPU_2CPU,
              description="Scaling coefficient on validation, same grid for every merge"),
        # placed after tune_alpha only so that no other stage of this run competes for the cores
        # while it is timed; it reads nothing from upstream
        Stage("timing_benchmark", f"{M}.timing:timing_benchmark_stage", params=("timing", "merge"),
              deps=("tune_alpha",),
              description="Core Space vs CircuMerge merge time at 4096-wide shapes (T=8, r=16)"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("data", "merge", "claims"),
              deps=("prepare_tasks", "train_adapters", "merge", "tune_alpha", "timing_benchmark"),
              resources=GPU_2CPU,
              description="Test per-task and normalised accuracy; pass criteria of CLAIMS.md"),
    ),
)
