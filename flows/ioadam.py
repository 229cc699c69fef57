"""ioadam — "IO-Adam: Rethinking Memory-Efficient Adaptive Optimizers from Gradient Computation".

Adam's second moment rebuilt from running sums of squared inputs and squared output gradients;
digits MLP and a causal LM, against Adam, Adafactor and SGD, with measured memory. The LM is a
byte-level transformer on stdlib docstrings (small) or LLaMA from LlamaConfig pre-trained on
C4-layout shards with a local tokenizer (paper): same stages, different config.
"""
from flows.runtime.dag import Method, Resources, Stage

M = "components.ioadam"
# LLaMA pre-training and its memory profile want a GPU at paper scale; none in smoke/small
LM_RESOURCES = Resources(num_cpus=1, num_gpus={"paper": 1})

METHOD = Method(
    name="ioadam",
    title="IO-Adam: memory-efficient Adam from input and output gradients",
    paper="https://openreview.net/forum?id=iCT5xdOlJH",
    config=f"{M}.config:IOAdamConfig",
    stages=(
        Stage("prepare_digits", f"{M}.data:prepare_digits_stage", params=("digits",),
              description="sklearn digits: stratified train/val/test split, standardised"),
        Stage("prepare_corpus", f"{M}.data:prepare_corpus_stage", params=("charlm",),
              description="LM corpus: stdlib docstring bytes (modules held out) or tokenised C4 shards"),
        Stage("sweep_digits", f"{M}.training:sweep_digits_stage",
              params=("digits", "sweep", "device"), deps=("prepare_digits",),
              fan_out={"optimizer": "digits.optimizers"}, resources=Resources(num_cpus=1),
              description="Same starting lr grid for every optimizer (widened until the best is interior), mean validation accuracy over the sweep seeds"),
        Stage("train_digits", f"{M}.training:train_digits_stage",
              params=("digits", "seeds", "device"), deps=("prepare_digits", "sweep_digits"),
              fan_out={"optimizer": "digits.optimizers", "seed": "seeds"},
              resources=Resources(num_cpus=1),
              description="MLP 64-256-256-10 with each optimizer and seed"),
        Stage("sweep_charlm", f"{M}.training:sweep_charlm_stage",
              params=("charlm", "sweep", "device"), deps=("prepare_corpus",),
              fan_out={"optimizer": "charlm.optimizers"}, resources=LM_RESOURCES,
              description="Same starting lr grid for every optimizer (widened until the best is interior), mean validation loss over the sweep seeds"),
        Stage("train_charlm", f"{M}.training:train_charlm_stage",
              params=("charlm", "device"), deps=("prepare_corpus", "sweep_charlm"),
              fan_out={"optimizer": "charlm.optimizers", "seed": "charlm.seeds"},
              resources=LM_RESOURCES,
              description="The LM (byte transformer or LLaMA) with each optimizer"),
        Stage("memory_profile", f"{M}.memory:memory_profile_stage",
              params=("digits", "charlm", "memory", "device"), resources=LM_RESOURCES,
              description="Exact state/grad bytes, profiler-measured step peak, step-time ratios"),
        Stage("evaluate", f"{M}.report:evaluate_stage",
              params=("digits", "charlm", "device"),
              deps=("prepare_digits", "prepare_corpus", "train_digits", "train_charlm"),
              resources=LM_RESOURCES,
              description="Test accuracy (digits) and held-out-module loss (char LM) of every run"),
        Stage("compare", f"{M}.report:compare_stage", params=("criteria",),
              deps=("evaluate", "memory_profile", "sweep_charlm"),
              description="Premises (Adam beats SGD-m on LM val loss; interior lrs), pass criteria, "
                          "quality-vs-memory table and plot"),
    ),
)
