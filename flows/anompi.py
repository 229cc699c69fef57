"""anompi — "Learning to Watch: Active Video Anomaly Understanding via Interleaved Policy
Optimization" (Anom-pi, ICML 2026), reconstructed from the abstract: an active viewer with
temporal operators trained by trajectory preferences (iDPO) on procedural surveillance videos."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.anompi"

METHOD = Method(
    name="anompi",
    title="Anom-pi-style active video anomaly understanding with iDPO (reconstructed)",
    paper="https://icml.cc/virtual/2026/poster/60569",
    config=f"{M}.config:AnompiConfig",
    stages=(
        Stage("build_env", f"{M}.data:build_env_stage", params=("env",),
              description="Procedural surveillance videos: specs with video-level labels"),
        Stage("pretrain_perception", f"{M}.pretrain:pretrain_perception_stage",
              params=("env", "perception", "policy"), deps=("build_env",),
              resources=Resources(num_cpus=1),
              description="Clip encoder + belief head under video-level labels; per-frame cache"),
        Stage("passive_baselines", f"{M}.passive:passive_baselines_stage",
              params=("env", "passive", "policy", "evaluate"), deps=("build_env", "pretrain_perception"),
              description="One belief head per passive sampler (uniform-k, pairs-k); premises P1, P2 on val"),
        Stage("sft_policy", f"{M}.train:sft_policy_stage", params=("policy", "sft", "seeds"),
              deps=("build_env", "pretrain_perception"), fan_out={"seed": "seeds"},
              description="Warm start: behaviour cloning of scripted trajectories"),
        Stage("rollout", f"{M}.train:rollout_stage", params=("policy", "rollout", "seeds"),
              deps=("build_env", "pretrain_perception", "sft_policy"), fan_out={"seed": "seeds"},
              description="Round-1 trajectories of the warm-start policy (batched over videos)"),
        Stage("build_preferences", f"{M}.train:build_preferences_stage",
              params=("policy", "idpo", "seeds"), deps=("rollout",),
              fan_out={"variant": "idpo.variants", "seed": "seeds"},
              description="Trajectory pairs ranked by the AEI utility (per ablation)"),
        Stage("train_idpo", f"{M}.train:train_idpo_stage",
              params=("policy", "rollout", "idpo", "seeds"),
              deps=("build_env", "pretrain_perception", "sft_policy", "rollout", "build_preferences"),
              fan_out={"variant": "idpo.variants", "seed": "seeds"},
              description="iDPO rounds (round 1 on the stored pairs, then on-policy re-sampling)"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("env", "policy", "sft", "idpo", "evaluate", "seeds"),
              deps=("build_env", "pretrain_perception", "passive_baselines", "sft_policy", "train_idpo"),
              fan_out={"seed": "seeds"},
              description="Accuracy / frames / steps: passive, dense, oracle, SFT, iDPO, ablations"),
        Stage("report", f"{M}.report:report_stage", params=("idpo",), deps=("evaluate",),
              description="Pass criteria over seeds, table, accuracy-vs-frames Pareto plot"),
    ),
)
