"""linrnn — "Why Linear Recurrent Memory Works in Partially Observable RL" (ICML 2026).

exact filter check and two-state / action sweeps are numpy; RingWorld PPO is torch. The paper
profile (`--profile paper`) is the paper's RL study on the same stages: S5 (h = 12, 256), Deep
ALF and the fixed filters, 8 seeds x 30M steps with Lu et al.'s PPO settings, on GPUs via Ray.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.linrnn"
# Paper profile: the recurrent memories (S5, Deep ALF) train on a GPU; these are small models,
# so four runs of the variant x seed fan-out share one device (Ray, and the local executor's
# fractional GPU slots). None in smoke/small.
TRAIN_RESOURCES = Resources(num_cpus=1, num_gpus={"paper": 0.25})

METHOD = Method(
    name="linrnn",
    title="Linear recurrent memory as exact / approximate HMM filters",
    paper="https://icml.cc/virtual/2026/poster/60568",
    config=f"{M}.config:LinrnnConfig",
    stages=(
        Stage("verify_exact", f"{M}.filters:verify_exact_stage", params=("exact",),
              description="Filter 1 vs the log-forward recursion on random permutation HMMs"),
        Stage("certify_exponent", f"{M}.filters:certify_exponent_stage",
              description="Large-deviation exponent xi of the two-state chain by quadrature"),
        Stage("sweep_two_state", f"{M}.sweeps:sweep_two_state_stage", params=("two_state",),
              description="ALF decoding error vs 1/eps for each delta schedule"),
        Stage("sweep_action", f"{M}.sweeps:sweep_action_stage", params=("action_sweep",),
              description="Action-controlled ALF vs Bayes under a random policy"),
        Stage("ringworld_premise", f"{M}.ringworld:premise_stage", params=("ringworld",),
              description="Premise: exact returns of the best memoryless policy and the fully observed optimum"),
        Stage("train_ringworld", f"{M}.ppo:train_stage", params=("ringworld", "seeds"),
              fan_out={"variant": "ringworld.variants", "seed": "seeds"},
              resources=TRAIN_RESOURCES,
              description="PPO on RingWorld per memory variant (filters, memoryless, diagonal linear RNN)"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("two_state", "ringworld", "seeds"),
              deps=("verify_exact", "certify_exponent", "sweep_two_state", "sweep_action",
                    "ringworld_premise", "train_ringworld"),
              description="Pass criteria of CLAIMS.md, plots"),
    ),
)
