"""selfsoup — "Self-Soupervision: Cooking Model Soups without Labels" (ICML 2026).

stock (MAE on natural-image crops) -> SSL ingredients (MAE, MoCoV3, MMCR, LeJEPA) on the digits
task's unlabelled train + val images, and on its unlabelled corrupted test images -> fine-tune ->
uniform / greedy soups, label-free self-seasoning -> clean + per-corruption evaluation.
Paper profile: the same stages with a transformers MAE ViT-B/16 stock (stock.checkpoint) on a
mini-VTAB task and its corruptions in ImageNet-C's layout, read from disk.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.selfsoup"
ONE_CPU = Resources(num_cpus=1)
# ViT-B/16 training and evaluation want one GPU per instance at paper scale; none in smoke/small
ONE_GPU_IN_PAPER = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="selfsoup",
    title="Model soups from self-supervised ingredients",
    paper="https://arxiv.org/abs/2602.02890",
    config=f"{M}.config:SelfsoupConfig",
    stages=(
        Stage("prepare_data", f"{M}.data:prepare_data_stage", params=("data",),
              description="Natural-image stock source; digits train / val / test; corrupted test sets"),
        Stage("pretrain_stock", f"{M}.ssl:pretrain_stock_stage", params=("data", "model", "stock"),
              deps=("prepare_data",), fan_out={"seed": "seeds"}, resources=ONE_GPU_IN_PAPER,
              description="MAE stock on the natural-image source (paper: stock.checkpoint) + linear-probe head init"),
        Stage("inter_train", f"{M}.ssl:inter_train_stage", params=("data", "model", "inter_train"),
              deps=("prepare_data", "pretrain_stock"),
              fan_out={"seed": "seeds"}, resources=ONE_GPU_IN_PAPER,
              description="SSL ingredients (all of a seed in one instance) on the task's unlabelled train + val images"),
        Stage("inter_train_shift", f"{M}.ssl:inter_train_shift_stage",
              params=("data", "model", "inter_train", "robustness"),
              deps=("prepare_data", "pretrain_stock"),
              fan_out={"seed": "seeds"}, resources=ONE_GPU_IN_PAPER,
              description="SSL ingredients on unlabelled corrupted test images (transductive)"),
        Stage("fine_tune", f"{M}.finetune:fine_tune_stage",
              params=("model", "robustness", "finetune"),
              deps=("prepare_data", "pretrain_stock", "inter_train", "inter_train_shift"),
              fan_out={"seed": "seeds"}, resources=ONE_GPU_IN_PAPER,
              description="Label fine-tuning of stock / every ingredient / self-soups of a seed, lr chosen on val"),
        Stage("soup", f"{M}.soup:soup_stage", params=("model", "inter_train", "finetune"),
              deps=("prepare_data", "pretrain_stock", "fine_tune"), fan_out={"seed": "seeds"},
              resources=ONE_GPU_IN_PAPER,
              description="Uniform and greedy soups (head: probe refitted on the soup's features); weight distances and loss barriers on val"),
        Stage("self_season", f"{M}.season:self_season_stage", params=("model", "inter_train", "season"),
              deps=("prepare_data", "pretrain_stock", "inter_train"), fan_out={"seed": "seeds"},
              resources=ONE_GPU_IN_PAPER, description="Label-free mixing weights over stock + SSL ingredients"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage", params=("data", "model", "inter_train", "finetune"),
              deps=("prepare_data", "pretrain_stock", "fine_tune", "soup"), fan_out={"seed": "seeds"},
              resources=ONE_GPU_IN_PAPER, description="Clean and per-corruption/severity test accuracy of every model; ingredients also with refitted heads (clean)"),
        Stage("report", f"{M}.evaluate:report_stage",
              params=("seeds", "model", "inter_train", "finetune", "data", "criteria"),
              deps=("prepare_data", "pretrain_stock", "fine_tune", "soup", "self_season", "evaluate"),
              resources=ONE_GPU_IN_PAPER, description="Premise checks (val) and pass criteria of CLAIMS.md over seeds"),
    ),
)
