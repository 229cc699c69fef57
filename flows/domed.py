"""domed — "DomED: Redesigning Ensemble Distillation for Domain Generalization" (ICML 2026).

Leave-one-domain-out on two digit benchmarks (SpuriousDigits, primary; RotatedDigits, reported):
single-domain teachers, distillation of each sample from the teachers that never saw its domain,
decoupled Dirichlet (EnD^2) term, baselines at equal step budget. Stages fan out over
benchmark x seed and loop over the test domains inside (few, longer instances: the runtime's
per-instance cost dominates at this size); teachers are shared across variants.
Paper profile: the DomainBed datasets from a local root and a transformers ResNet-50, through
the same stages; each training / prediction instance then asks Ray for one GPU. Downstream
instances depend on their own (benchmark, seed) item only (``item_deps``), so DVC hashes one
item's models per instance, not every instance's (GBs of ResNet states at paper scale).
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.domed"
FOLD = {"benchmark": "data.benchmarks", "seed": "seeds"}
# ResNet-50 training and prediction at 224 px want a GPU in the paper profile; none otherwise
GPU_IN_PAPER = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="domed",
    title="Domain-aware ensemble distillation (DomED) for domain generalization",
    paper="https://icml.cc/virtual/2026/poster/60567",
    config=f"{M}.config:DomedConfig",
    stages=(
        Stage("build_domains", f"{M}.data:build_domains_stage", params=("data",),
              description="SpuriousDigits and RotatedDigits (6 domains each) or the DomainBed datasets' file index, with in/out splits"),
        Stage("allocate", f"{M}.allocation:allocate_stage", params=("data", "allocation"),
              deps=("build_domains",),
              description="Teacher domain subsets tau_m and unseen teachers U(d) per fold"),
        Stage("train_teachers", f"{M}.train:train_teachers_stage",
              params=("data", "model", "optim", "seeds"), deps=("build_domains", "allocate"),
              fan_out=FOLD, resources=GPU_IN_PAPER,
              description="One ERM teacher per source domain"),
        Stage("train_erm", f"{M}.train:train_erm_stage",
              params=("data", "model", "optim", "baselines", "seeds"), deps=("build_domains",),
              fan_out=FOLD, resources=GPU_IN_PAPER,
              description=("Deep ensemble of ERMs on all sources (member 0 = ERM) + temperature, "
                           "EoA moving averages, DiWA average")),
        Stage("teacher_predict", f"{M}.train:teacher_predict_stage",
              params=("data", "model", "seeds"),
              deps=("build_domains", "train_teachers", "train_erm"), item_deps=("train_teachers", "train_erm"),
              fan_out=FOLD, resources=GPU_IN_PAPER,
              description="Teacher logits on source rows with the per-sample unseen-teacher mask"),
        Stage("train_student", f"{M}.train:train_student_stage",
              params=("data", "model", "optim", "student", "seeds"),
              deps=("build_domains", "teacher_predict"), item_deps=("teacher_predict",),
              fan_out=FOLD, resources=GPU_IN_PAPER,
              description=("DomED and distillation baselines (beta=0, EnD2-only, seen-domain KD); "
                           "paper: (T, beta) chosen on source validation")),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("data", "model", "student", "evaluation", "seeds"),
              deps=("build_domains", "train_erm", "train_student"), item_deps=("train_erm", "train_student"),
              fan_out=FOLD, resources=GPU_IN_PAPER,
              description="acc, NLL, ECE, PRR, AUROC on the held-out domain"),
        Stage("aggregate", f"{M}.evaluate:aggregate_stage", params=("data", "evaluation", "seeds"),
              deps=("evaluate", "teacher_predict"),
              description="Premise checks P1-P2, mean +- s.e. over folds, per-domain tables, D1-D4"),
    ),
)
