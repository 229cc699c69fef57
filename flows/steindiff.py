"""steindiff — "Mitigating the Contractivity Trap in Diffusion ODEs via Stein Stabilization"
(ICML 2026). Exact-denoiser Gaussian mixture + sklearn digits with a trained EDM MLP denoiser
(small); the paper profile swaps the digits arm for a pretrained diffusers UNet (pixel or latent)
and an FD in a pretrained encoder's features, through the same stages."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.steindiff"
# the paper profile's pretrained UNet / feature encoder want a GPU; none in smoke/small
GPU_IN_PAPER = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="steindiff",
    title="Stein-corrected large-step diffusion ODE sampling",
    paper="https://icml.cc/virtual/2026/poster/60561",
    config=f"{M}.config:SteindiffConfig",
    stages=(
        Stage("prepare_data", f"{M}.data:prepare_data_stage", params=("data",),
              description="Mixture spec + reference samples; digits train/test split"),
        Stage("train_denoiser", f"{M}.train:train_denoiser_stage", params=("denoiser", "paper"),
              deps=("prepare_data",), resources=GPU_IN_PAPER,
              description="EDM-preconditioned MLP denoiser on digits (paper: the pretrained UNet, "
                          "loaded and described)"),
        Stage("train_feature_net", f"{M}.train:train_feature_net_stage",
              params=("feature_net", "paper"), deps=("prepare_data",), resources=GPU_IN_PAPER,
              description="Digit classifier whose features define FD-digits (paper: reference "
                          "statistics in a pretrained encoder's features)"),
        Stage("verify_stein", f"{M}.verify:verify_stein_stage", params=("verify",),
              deps=("prepare_data",),
              description="Stein / Hutchinson / closed-form gamma identities; fails the run if off"),
        Stage("sample_mixture", f"{M}.sample:sample_mixture_stage", params=("sample", "seeds"),
              deps=("prepare_data",), fan_out={"solver": "sample.solvers", "seed": "seeds"},
              description="steps x {none, stein} trajectories with the exact mixture denoiser"),
        Stage("sample_digits", f"{M}.sample:sample_digits_stage",
              params=("sample", "seeds", "paper"), deps=("train_denoiser",),
              fan_out={"solver": "sample.solvers", "seed": "seeds"}, resources=GPU_IN_PAPER,
              description="steps x {none, stein} trajectories with the trained digits denoiser "
                          "(paper: the pretrained UNet, in batches)"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("evaluate", "paper"),
              deps=("prepare_data", "train_feature_net", "sample_mixture", "sample_digits"),
              resources=GPU_IN_PAPER,
              description="SW2, MMD, mode coverage, log-density; FD-digits (paper: FD to the "
                          "reference statistics)"),
        Stage("report", f"{M}.report:report_stage",
              deps=("verify_stein", "evaluate"),
              description="Pass criteria of CLAIMS.md, full table with control rows, plots"),
    ),
)
