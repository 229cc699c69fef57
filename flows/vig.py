"""vig — "Focusing Where Vision Matters: Selective Training for LVLMs via Visual Information Gain"
(ICML 2026).

A tiny transformers LLaVA on generated scenes with faint objects and a 90 % colour prior: score VIG
(image vs blurred image) with a reference model, keep high-VIG samples / tokens, and compare with
vanilla and a token-matched random control at the same step budget.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.vig"

METHOD = Method(
    name="vig",
    title="Visual Information Gain and VIG-guided selective training",
    paper="https://arxiv.org/abs/2602.17186",
    config=f"{M}.config:VigConfig",
    stages=(
        Stage("prepare_data", f"{M}.data:prepare_data_stage", params=("data",),
              description="Faint objects + distractor on photo crops, colour prior 90/10; train/val/test/align"),
        Stage("align_stage1", f"{M}.train:align_stage1_stage", params=("data", "model", "align"),
              deps=("prepare_data",),
              description="Stage-1 alignment on captions of an unnamed object (no prior)"),
        Stage("train_reference", f"{M}.train:train_reference_stage",
              params=("data", "model", "reference"), deps=("prepare_data", "align_stage1"),
              description="Vanilla stage-2 reference model that scores VIG"),
        Stage("score_vig", f"{M}.score:score_vig_stage", params=("data", "model", "vig"),
              deps=("prepare_data", "train_reference"),
              description="Token / sample VIG (image vs blurred image); probes; scorer's blur premise (val)"),
        Stage("select", f"{M}.score:select_stage", params=("vig",),
              deps=("prepare_data", "score_vig"),
              description="Top-p % samples by VIG, tau_p token mask"),
        Stage("train_arm", f"{M}.train:train_arm_stage",
              params=("data", "model", "vig", "train", "seeds"),
              deps=("prepare_data", "align_stage1", "select"),
              fan_out={"variant": "train.variants", "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="Stage-2 arms (vanilla / token-matched random / vig) at one step budget"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("data", "model", "vig", "train", "seeds", "claims"),
              deps=("prepare_data", "score_vig", "train_arm"),
              description="Accuracy, blurred-image prior rate, confusion matrices, premises (val), criteria"),
    ),
)
