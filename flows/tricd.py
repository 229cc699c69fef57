"""tricd — "Learning to Decode Against Compositional Hallucination in Video Multimodal Large
Language Models" (ICML 2026): the OmniVCHall benchmark and TriCD triple-pathway contrastive
decoding. Procedural videos, a toy video LLM with a disclosed language bias, REINFORCE policy."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.tricd"
# the video-LLM stages want one GPU at paper scale (Qwen2.5-VL-7B in bf16: ~17 GB); none in smoke/small
VLM = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="tricd",
    title="OmniVCHall + TriCD: learned-perturbation contrastive decoding for video hallucination",
    paper="https://arxiv.org/abs/2602.00559",
    config=f"{M}.config:TricdConfig",
    stages=(
        Stage("build_benchmark", f"{M}.benchmark:build_benchmark_stage", params=("bench", "paper"),
              description="Procedural videos + isolated/compositional YN and MC QA (biased pretrain, "
                          "balanced train/val/test); paper: the OmniVCHall release, decoded with PyAV"),
        Stage("train_backbone", f"{M}.backbone:train_backbone_stage", params=("bench", "backbone", "paper"),
              deps=("build_benchmark",), resources=Resources(num_cpus=1),
              description="Toy video LLM trained on the biased pretrain split (frozen afterwards); "
                          "paper: the pretrained checkpoint is recorded, not trained"),
        Stage("eval_base", f"{M}.backbone:eval_base_stage", params=("bench", "backbone", "paper"),
              deps=("build_benchmark", "train_backbone"), resources=VLM,
              description="Plain decoding: test, val and a held-out biased control"),
        Stage("precompute_saliency", f"{M}.saliency:precompute_saliency_stage", params=("saliency", "paper"),
              deps=("build_benchmark",), resources=VLM,
              description="Motion (Lucas-Kanade) and visual saliency (spectral residual; paper: DINO attention)"),
        Stage("train_policy", f"{M}.policy:train_policy_stage",
              params=("bench", "backbone", "policy", "seeds", "paper"),
              deps=("build_benchmark", "train_backbone", "precompute_saliency"),
              fan_out={"seed": "seeds"}, resources=VLM,
              description="Router + gater with REINFORCE on the benchmark's train split"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("bench", "backbone", "policy", "evaluate", "seeds", "paper"),
              deps=("build_benchmark", "train_backbone", "precompute_saliency", "train_policy"),
              fan_out={"seed": "seeds"}, resources=VLM,
              description="TriCD, VCD-noise, neg-only, pos-only, random router, best fixed tool"),
        Stage("report", f"{M}.report:report_stage", deps=("evaluate",),
              description="CLAIMS criteria over seeds, per-type / per-task tables, plot"),
    ),
)
