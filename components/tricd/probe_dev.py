"""Dev pipeline for the v3 calibration (bench.seed 99 = dev splits, never the committed ones):
build -> train_backbone -> eval_base (val premises) -> saliency -> train_policy for the given
entropy coefficients and dev policy seeds, stage functions called directly (one process).
    python -m components.tricd.probe_dev OUTDIR '{"backbone": {"yn_first": 0.6}}' 0.0,0.05,0.5 100,101
    python -m components.tricd.probe_dev OUTDIR '{}' '[{"lr": 2e-3, "tool_ids": false}]' 100,101   (v4)
Dev data for probe_oracle: python -m components.tricd.probe_dev --data OUT.pt N_PRETRAIN BIAS
What the router could learn (v13): python -m components.tricd.probe_dev --tools OUTDIR '{}'
  and whether it is predictable: python -m components.tricd.probe_dev --predict OUTDIR '{}'"""
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


def tool_effects(out: Path, over: dict) -> None:
    """On dev val (after ``pipeline`` built OUTDIR): each tool alone on every item, negative
    pathway only (a1 0, a2 1), and the shares of items it fixes and breaks against the undecoded
    answer; then the per-item oracle over the eight single tools (an upper bound on what a
    router choosing one tool could gain) and the share of items no single tool changes."""
    import torch

    from components.tricd.tools import TOOL_NAMES

    torch.set_num_threads(1)
    cache, net = _single_tool_effects(out, *_dev_backbone(out, over), "val")
    for t, name in enumerate(TOOL_NAMES):
        print(f"{name:>10}: fixes {(net[:, t] > 0).mean():.3f} breaks {(net[:, t] < 0).mean():.3f}")
    print(f"oracle single tool: fixes {(net.max(1) > 0).mean():.3f} of items; "
          f"no tool changes {(net == 0).all(1).mean():.3f}")


def _dev_config(over: dict):
    """The small profile on the dev splits (bench.seed 99) with ``over`` merged in."""
    from components.common.config import deep_merge
    from components.tricd.config import TricdConfig

    values = {"bench": {"seed": 99}}
    deep_merge(values, over)
    return TricdConfig.for_profile("small", overrides=values)


def _dev_backbone(out: Path, over: dict):
    """(cfg, the frozen backbone that ``pipeline`` trained in OUTDIR)."""
    from components.tricd.backbones import open_backbone

    cfg = _dev_config(over)
    return cfg, open_backbone(cfg, out / "backbone")


def _single_tool_effects(out: Path, cfg, backbone, split: str):
    """(cache, net) for a dev split: net[i, t] = +1 / -1 / 0 when tool t alone (negative pathway
    only) fixes / breaks / leaves the undecoded answer of item i."""
    import numpy as np
    import torch

    from components.common.io import load_torch
    from components.tricd.decode import load_split, predict
    from components.tricd.policy import build_cache, calibrated_predictions
    from components.tricd.tools import TOOL_NAMES

    data = load_split(out / "build", split, backbone=backbone)
    cache = build_cache(backbone, data, load_torch(f"{out}/saliency/{split}_saliency.pt"))
    right0 = predict(cache.q_o.numpy(), cache.tasks) == cache.answers
    net = np.zeros((len(right0), len(TOOL_NAMES)), int)
    for t in range(len(TOOL_NAMES)):
        masks = np.zeros_like(net, dtype=bool)
        masks[:, t] = True
        pred, _ = calibrated_predictions(backbone, cache, masks, torch.zeros(len(right0)), cfg.policy, 0.0, 1.0)
        net[:, t] = (pred == cache.answers).astype(int) - right0.astype(int)
    return cache, net


def tool_predictability(out: Path, over: dict) -> None:
    """Could any router know in advance which tool fixes an item? Per tool, a logistic
    regression on the mean-pooled frozen hidden states (what the gater reads; the router reads
    the same states through attention), trained on dev train's single-tool outcomes: val AUC of
    "fixes" and of "breaks", then the val gain of a supervised router that applies the tool with
    the largest predicted fix-minus-break margin where that margin is positive."""
    import numpy as np
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import StandardScaler

    from components.tricd.tools import TOOL_NAMES

    torch.set_num_threads(1)
    feats, nets = {}, {}
    cfg, backbone = _dev_backbone(out, over)
    for split in ("train", "val"):
        cache, nets[split] = _single_tool_effects(out, cfg, backbone, split)
        keep = (~cache.pad).unsqueeze(-1).float()
        feats[split] = ((cache.hidden.float() * keep).sum(1) / keep.sum(1)).numpy()
    scaler = StandardScaler().fit(feats["train"])
    x_tr, x_va = scaler.transform(feats["train"]), scaler.transform(feats["val"])
    margin = np.zeros(nets["val"].shape)
    for t, name in enumerate(TOOL_NAMES):
        row, p = [], {}
        for label, sign in (("fixes", 1), ("breaks", -1)):
            y_tr, y_va = nets["train"][:, t] == sign, nets["val"][:, t] == sign
            clf = LogisticRegression(C=0.1, class_weight="balanced", max_iter=2000).fit(x_tr, y_tr)
            p[label] = clf.predict_proba(x_va)[:, 1]
            auc = roc_auc_score(y_va, p[label]) if 0 < y_va.sum() < len(y_va) else float("nan")
            row.append(f"{label} {y_tr.mean():.3f}/{y_va.mean():.3f} AUC {auc:.2f}")
        margin[:, t] = p["fixes"] - p["breaks"]
        print(f"{name:>10}: " + "; ".join(row), flush=True)
    pick = margin.argmax(1)
    apply = margin[np.arange(len(pick)), pick] > 0
    gain = nets["val"][np.arange(len(pick)), pick] * apply
    print(f"supervised single-tool router on val: applies a tool to {apply.mean():.3f} of items, "
          f"accuracy change {gain.mean():+.4f} (oracle {nets['val'].max(1).clip(0).mean():+.4f})")


def pipeline(out: Path, over: dict, coefs: list, seeds: list[int]) -> None:
    """``coefs``: entropy coefficients (v3), or policy-section override dicts (v4: lr, tool_ids)."""
    import torch

    from components.common.config import deep_merge
    from components.common.context import LocalContext
    from components.tricd import backbone, benchmark, policy, saliency

    torch.set_num_threads(1)
    cfg = _dev_config(over)
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
        v2 = json.loads(json.dumps(over))
        pol = coef if isinstance(coef, dict) else {"entropy_coef": coef}
        deep_merge(v2, {"policy": pol})
        cfg = _dev_config(v2)
        label = f"e{coef}" if not isinstance(coef, dict) else "-".join(f"{k}{v}" for k, v in sorted(pol.items()))
        for seed in seeds:
            stage(f"policy-{label}", policy.train_policy_stage,
                  {"build_benchmark": b, "train_backbone": m, "precompute_saliency": s}, {"seed": seed})


if __name__ == "__main__":
    if sys.argv[1] == "--predict":
        tool_predictability(Path(sys.argv[2]), json.loads(sys.argv[3]))
    elif sys.argv[1] == "--tools":
        tool_effects(Path(sys.argv[2]), json.loads(sys.argv[3]))
    elif sys.argv[1] == "--data":
        dev_data(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        grid = (json.loads(sys.argv[3]) if sys.argv[3].startswith("[")
                else [float(c) for c in sys.argv[3].split(",") if c])
        pipeline(Path(sys.argv[1]), json.loads(sys.argv[2]), grid,
                 [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4 else [100, 101, 102])
