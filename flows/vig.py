"""vig — "Focusing Where Vision Matters: Selective Training for LVLMs via Visual Information Gain"
(ICML 2026).

A tiny transformers LLaVA on generated scenes with faint objects and a 90 % colour prior: score VIG
(image vs blurred image) with a reference model, keep high-VIG samples / tokens, and compare with
vanilla and a token-matched random control at the same step budget. ``--profile paper``: the
same stages on LLaVA-1.5, LLaVA-665K and benchmark files from local paths (components.vig.llava).
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.vig"
# LLaVA-1.5 forward/backward passes want a GPU on the paper profile; small runs on CPU
LLAVA = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="vig",
    title="Visual Information Gain and VIG-guided selective training",
    paper="https://arxiv.org/abs/2602.17186",
    config=f"{M}.config:VigConfig",
    stages=(
        Stage("prepare_data", f"{M}.data:prepare_data_stage", params=("data", "paper"),
              description="Faint objects + distractor on photo crops, colour prior 90/10; train/val/test/align"),
        Stage("align_stage1", f"{M}.train:align_stage1_stage", params=("data", "model", "align"),
              deps=("prepare_data",),
              description="Stage-1 alignment on captions of an unnamed object (no prior)"),
        Stage("train_reference", f"{M}.train:train_reference_stage",
              params=("data", "model", "reference"), deps=("prepare_data", "align_stage1"),
              description="Vanilla stage-2 reference model that scores VIG"),
        Stage("score_vig", f"{M}.score:score_vig_stage", params=("data", "model", "vig", "paper"),
              deps=("prepare_data", "train_reference"), resources=LLAVA,
              description="Token / sample VIG (image vs blurred image); probes; scorer's blur premise (val)"),
        Stage("select", f"{M}.score:select_stage", params=("vig",),
              deps=("prepare_data", "score_vig"),
              description="Top-p % samples by VIG, tau_p token mask"),
        Stage("train_arm", f"{M}.train:train_arm_stage",
              params=("data", "model", "vig", "train", "seeds", "paper"),
              deps=("prepare_data", "align_stage1", "select"),
              fan_out={"variant": "train.variants", "seed": "seeds"},
              resources=LLAVA,
              description="Stage-2 arms (vanilla / token-matched random / vig) at one step budget"),
        Stage("evaluate", f"{M}.evaluate:evaluate_stage",
              params=("data", "model", "vig", "train", "seeds", "claims", "paper"),
              deps=("prepare_data", "score_vig", "train_arm"), resources=LLAVA,
              description="Accuracy, blurred-image prior rate, confusion matrices, premises (val), criteria"),
    ),
)
