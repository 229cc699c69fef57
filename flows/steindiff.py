"""steindiff — "Mitigating the Contractivity Trap in Diffusion ODEs via Stein Stabilization"
(ICML 2026). Exact-denoiser Gaussian mixture + sklearn digits with a trained EDM MLP denoiser."""
from flows.runtime.dag import Method, Resources, Stage

M = "components.steindiff"

METHOD = Method(
    name="steindiff",
    title="Stein-corrected large-step diffusion ODE sampling",
    paper="https://icml.cc/virtual/2026/poster/60561",
    config=f"{M}.config:SteindiffConfig",
    stages=(
        Stage("prepare_data", f"{M}.data:prepare_data_stage", params=("data",),
              description="Mixture spec + reference samples; digits train/test split"),
        Stage("train_denoiser", f"{M}.train:train_denoiser_stage", params=("denoiser",),
              deps=("prepare_data",), resources=Resources(num_cpus=1),
              description="EDM-preconditioned MLP denoiser on digits"),
        Stage("train_feature_net", f"{M}.train:train_feature_net_stage", params=("feature_net",),
              deps=("prepare_data",), description="Digit classifier whose features define FD-digits"),
        Stage("verify_stein", f"{M}.verify:verify_stein_stage", params=("verify",),
              deps=("prepare_data",),
              description="Stein / Hutchinson / closed-form gamma identities; fails the run if off"),
        Stage("sample_mixture", f"{M}.sample:sample_mixture_stage", params=("sample", "seeds"),
              deps=("prepare_data",), fan_out={"solver": "sample.solvers", "seed": "seeds"},
              description="steps x {none, stein} trajectories with the exact mixture denoiser"),
        Stage("sample_digits", f"{M}.sample:sample_digits_stage", params=("sample", "seeds"),
              deps=("train_denoiser",), fan_out={"solver": "sample.solvers", "seed": "seeds"},
              description="steps x {none, stein} trajectories with the trained digits denoiser"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("evaluate",),
              deps=("prepare_data", "train_feature_net", "sample_mixture", "sample_digits"),
              description="SW2, MMD, mode coverage, log-density; FD-digits"),
        Stage("report", f"{M}.report:report_stage",
              deps=("verify_stein", "evaluate"),
              description="Pass criteria of CLAIMS.md, full table with control rows, plots"),
    ),
)
