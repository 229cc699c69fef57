"""Dev pipeline for the v3 calibration (bench.seed 99 = dev splits, never the committed ones):
build -> train_backbone -> eval_base (val premises) -> saliency -> train_policy for the given
entropy coefficients and dev policy seeds, stage functions called directly (one process).
    python -m components.tricd.probe_dev OUTDIR '{"backbone": {"yn_first": 0.6}}' 0.0,0.05,0.5 100,101
    python -m components.tricd.probe_dev OUTDIR '{}' '[{"lr": 2e-3, "tool_ids": false}]' 100,101   (v4)
Dev data for probe_oracle: python -m components.tricd.probe_dev --data OUT.pt N_PRETRAIN BIAS"""
import json
import sys
import time
from pathlib import Path


def dev_data(out: str, n_pretrain: int, bias: float) -> None:
    """The dev pretrain split (seed 2026) and dev val split (seed 99, 300 videos) for probe_oracle."""
    import numpy as np
    import torch

    from components.tricd import benchmark as B

    kw = dict(frames=8, size=32, world=24, bias=bias, biased_types=["temporal", "camera", "action", "event"],
              adversarial_rate=0.67)
    pv, pprog, pitems = B.build_split("pretrain", n_pretrain, 2, np.random.default_rng(2026), **kw)
    vv, vprog, vitems = B.build_split("val", 300, 1, np.random.default_rng(99), **kw)
    torch.save({"pv": torch.from_numpy(pv), "pprog": pprog, "pitems": pitems, "vv": torch.from_numpy(vv),
                "vprog": vprog, "vitems": vitems}, out)


def pipeline(out: Path, over: dict, coefs: list, seeds: list[int]) -> None:
    """``coefs``: entropy coefficients (v3), or policy-section override dicts (v4: lr, tool_ids)."""
    import torch

    from components.common.config import deep_merge
    from components.common.context import LocalContext
    from components.tricd import backbone, benchmark, policy, saliency
    from components.tricd.config import TricdConfig

    torch.set_num_threads(1)
    values = {"bench": {"seed": 99}}
    deep_merge(values, over)
    cfg = TricdConfig.for_profile("small", overrides=values)
    t0 = time.time()

    def stage(name, fn, inputs, item=None):
        d = out / name if item is None else out / f"{name}-{item['seed']}"
        if (d / "done.json").exists():
            return d, json.loads((d / "done.json").read_text())
        ctx = LocalContext(out_dir=d, inputs=inputs, item=item or {})
        fn(cfg, ctx)
        (d / "done.json").write_text(json.dumps(ctx.summary))
        (d / "history.json").write_text(json.dumps(ctx.history))   # curves (v5: val iso per eval)
        print(name, item, round(time.time() - t0),
              json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in ctx.summary.items()}), flush=True)
        return d, ctx.summary

    b, _ = stage("build", benchmark.build_benchmark_stage, {})
    m, _ = stage("backbone", backbone.train_backbone_stage, {"build_benchmark": b})
    stage("eval_base", backbone.eval_base_stage, {"build_benchmark": b, "train_backbone": m})
    s, _ = stage("saliency", saliency.precompute_saliency_stage, {"build_benchmark": b})
    for coef in coefs:
        v2 = json.loads(json.dumps(values))
        pol = coef if isinstance(coef, dict) else {"entropy_coef": coef}
        deep_merge(v2, {"policy": pol})
        cfg = TricdConfig.for_profile("small", overrides=v2)
        label = f"e{coef}" if not isinstance(coef, dict) else "-".join(f"{k}{v}" for k, v in sorted(pol.items()))
        for seed in seeds:
            stage(f"policy-{label}", policy.train_policy_stage,
                  {"build_benchmark": b, "train_backbone": m, "precompute_saliency": s}, {"seed": seed})


if __name__ == "__main__":
    if sys.argv[1] == "--data":
        dev_data(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        grid = (json.loads(sys.argv[3]) if sys.argv[3].startswith("[")
                else [float(c) for c in sys.argv[3].split(",") if c])
        pipeline(Path(sys.argv[1]), json.loads(sys.argv[2]), grid,
                 [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4 else [100, 101, 102])
