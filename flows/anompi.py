"""anompi — "Learning to Watch: Active Video Anomaly Understanding via Interleaved Policy
Optimization" (Anom-pi, ICML 2026), reconstructed from the abstract: an active viewer with
temporal operators trained by trajectory preferences (iDPO) on procedural surveillance videos
(small, smoke) or, as a Qwen2-VL chat over UCF-Crime / XD-Violence frames (paper), on the same
stage functions."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.anompi"
# the video-LLM stages want one GPU at paper scale (Qwen2-VL-2B, bf16); none in smoke/small
VLM = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="anompi",
    title="Anom-pi-style active video anomaly understanding with iDPO (reconstructed)",
    paper="https://icml.cc/virtual/2026/poster/60569",
    config=f"{M}.config:AnompiConfig",
    stages=(
        Stage("build_env", f"{M}.data:build_env_stage", params=("env", "paper"),
              description="Procedural surveillance videos: specs with video-level labels"),
        Stage("pretrain_perception", f"{M}.pretrain:pretrain_perception_stage",
              params=("env", "perception", "policy", "paper"), deps=("build_env",),
              resources=Resources(num_cpus=1),
              description="Clip encoder + belief head under video-level labels; per-frame cache"),
        Stage("passive_baselines", f"{M}.passive:passive_baselines_stage",
              params=("env", "passive", "policy", "evaluate", "paper"), deps=("build_env", "pretrain_perception"),
              resources=VLM, description="One belief head per passive sampler (uniform-k, pairs-k); premises P1, P2 on val"),
        Stage("sft_policy", f"{M}.train:sft_policy_stage", params=("policy", "sft", "seeds", "paper"),
              deps=("build_env", "pretrain_perception"), fan_out={"seed": "seeds"}, resources=VLM,
              description="Warm start: behaviour cloning of scripted trajectories"),
        Stage("rollout", f"{M}.train:rollout_stage", params=("policy", "rollout", "seeds", "paper"),
              deps=("build_env", "pretrain_perception", "sft_policy"), fan_out={"seed": "seeds"},
              resources=VLM, description="Round-1 trajectories of the warm-start policy (batched over videos)"),
        Stage("build_preferences", f"{M}.train:build_preferences_stage",
              params=("policy", "idpo", "seeds", "paper"), deps=("rollout",),
              fan_out={"variant": "idpo.variants", "seed": "seeds"},
              description="Trajectory pairs ranked by the AEI utility (per ablation)"),
        Stage("train_idpo", f"{M}.train:train_idpo_stage",
              params=("policy", "rollout", "idpo", "seeds", "paper"),
              deps=("build_env", "pretrain_perception", "sft_policy", "rollout", "build_preferences"),
              fan_out={"variant": "idpo.variants", "seed": "seeds"}, resources=VLM,
              description="iDPO rounds (round 1 on the stored pairs, then on-policy re-sampling)"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("env", "policy", "sft", "idpo", "evaluate", "seeds", "paper"),
              deps=("build_env", "pretrain_perception", "passive_baselines", "sft_policy", "train_idpo"),
              fan_out={"seed": "seeds"}, resources=VLM,
              description="Accuracy / frames / steps: passive, dense, oracle, SFT, iDPO, ablations"),
        Stage("report", f"{M}.report:report_stage", params=("idpo", "paper"), deps=("evaluate",),
              description="Pass criteria over seeds, table, accuracy-vs-frames Pareto plot"),
    ),
)
