"""orbit — "InfiMed-ORBIT: Aligning LLMs on Open-Ended Complex Tasks via Rubric-Based Incremental
Training" (ICML 2026). Synthetic consultations, retrieval-conditioned rubrics, a small decoder
Qwen3 policy, GRPO through TRL with incremental rubric curricula, HealthBench-format grading.
Paper profile: HealthBench JSONL, Qwen3-4B-Instruct from a local folder, rubric generation and
judging through an OpenAI-compatible endpoint, on the same stages."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.orbit"
# the policy (Qwen3-4B-Instruct in the paper profile) generates, trains or is evaluated here, or
# the retrieval embedder runs; one GPU each (the TRL path is single-process), none in smoke/small
POLICY = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="orbit",
    title="Rubric-based incremental RL for medical dialogue (ORBIT)",
    paper="https://arxiv.org/abs/2510.15859",
    config=f"{M}.config:OrbitConfig",
    stages=(
        Stage("build_cases", f"{M}.data:build_cases_stage", params=("cases", "paper"),
              description="Synthetic consultations truncated at a patient turn, HealthBench-format "
                          "rows; train / held-out / seed-pool splits (paper: HealthBench JSONL)"),
        Stage("generate_rubrics", f"{M}.rubrics:generate_rubrics_stage", params=("rubrics",),
              deps=("build_cases",), resources=POLICY,
              description="Retrieval of similar seed cases and candidate criteria (MiniLM; paper: "
                          "Qwen3-Embedding + optional reranker) + generator -> <= 20 validated items per "
                          "training case; the generic baseline rubric"),
        Stage("train_base", f"{M}.base:train_base_stage", params=("policy", "paper"), deps=("build_cases",),
              resources=POLICY,
              description="Base policy: a tiny Qwen3 causal LM (word-level tokenizer) pre-trained on mediocre "
                          "generic replies (paper: the local Qwen3-4B-Instruct checkpoint, referenced)"),
        Stage("difficulty_filter", f"{M}.filter:difficulty_filter_stage", params=("filter", "judge"),
              deps=("build_cases", "generate_rubrics", "train_base"), resources=POLICY,
              description="Base rollouts graded by rule (predicates) or the rubric judge (free text); "
                          "drop flat / solved cases; order items by difficulty"),
        Stage("grpo_train", f"{M}.train:grpo_train_stage", params=("grpo", "seeds", "judge"),
              deps=("build_cases", "generate_rubrics", "train_base", "difficulty_filter"),
              fan_out={"variant": "grpo.variants", "seed": "seeds"}, resources=POLICY,
              description="GRPO through TRL (group advantages, clip 0.2/0.28, token-mean) with "
                          "case rubrics (stochastic_review / curriculum_admission / all items) or the generic rubric"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("evaluate",),
              deps=("build_cases", "train_base", "grpo_train"), resources=POLICY,
              description="Held-out HealthBench-format score: clipped mean, bootstrap std, per axis "
                          "and theme, positive-hit / negative rates"),
        Stage("judge_agreement", f"{M}.evaluate:judge_agreement_stage", params=("agreement",),
              deps=("build_cases", "generate_rubrics", "difficulty_filter", "evaluate"),
              resources=Resources(num_cpus=1),
              description="Rule judge vs an independent MiniLM judge: Cohen's kappa"),
        Stage("report", f"{M}.report:report_stage", params=("report", "seeds"),
              deps=("evaluate", "judge_agreement"),
              description="Pass criteria of CLAIMS.md over seeds"),
    ),
)
