"""Dev probe of the v7 calibration (CLAIMS.md "Calibration v7"; dev splits only: bench.seed 99).
Trains one backbone with ``train_backbone_stage`` on the dev pretrain split under config
overrides and prints, on the dev val split: P1's quantity (isolated macro), the four task
accuracies, P2's yes-bias (biased / unbiased types), per-type S-YN accuracy and yes-rate, per-type
S-MC accuracy, and the vision tower's grounding quality (token-level colour-shape F1 at p > 0.5,
video-level "the two strongest colour-shape pairs are the two objects", motion accuracy on the
tokens that hold an object).
    python -m components.tricd.probe_bind OUT LABEL '{"backbone": {"merge": 2}}' [--oracle] [--tower-only]
``--oracle``: the tower's grounding logits are replaced by the scene program's ground truth
(+-8) and its features by zeros, i.e. perfect word-aligned visual tokens: the language side's
ceiling at that token layout. The dev benchmark is built once per bench setting under OUT."""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


def _key(video: torch.Tensor) -> str:
    return hashlib.md5(video.float().contiguous().numpy().tobytes()).hexdigest()


def oracle_tower(model, videos_programs, size: int):
    """Replace ``model.tower_state`` by the ground truth of the programs (looked up by video)."""
    from components.tricd import video as V

    table = {}
    for videos, programs in videos_programs:
        for v, p in zip(videos, programs):
            lab = torch.from_numpy(V.token_labels(p, size, model.token_px, model.tpatch))   # (T', P, 17)
            scene = torch.zeros(len(V.SCENES))
            scene[V.SCENES.index(p["scene"])] = 1.0
            scene = scene.expand(lab.shape[0], lab.shape[1], -1)
            table[_key(v)] = 8.0 * (2 * torch.cat([lab, scene], -1) - 1)
    d = model.tok_emb.embedding_dim

    def tower_state(video):
        g = torch.stack([table[_key(v)] for v in video])
        return torch.zeros(*g.shape[:3], d), g

    model.tower_state = tower_state


@torch.no_grad()
def tower_quality(model, videos, programs, size: int) -> dict:
    from components.tricd import video as V
    from components.tricd.model import camera_grounding, split_grounding

    feats, g = model.tower_state(videos.float())
    pairs, motion, _ = split_grounding(g)
    lab = torch.from_numpy(np.stack([V.token_labels(p, size, model.token_px, model.tpatch) for p in programs]))
    lp, lm = lab[..., :len(V.PAIRS)], lab[..., len(V.PAIRS):]
    pred = pairs > 0
    tp = (pred & (lp > 0)).sum().item()
    prec, rec = tp / max(1, pred.sum().item()), tp / max(1, (lp > 0).sum().item())
    vid = pairs.amax((1, 2)).topk(2, -1).indices.sort(-1).values
    true = torch.tensor([sorted(V.PAIRS.index((o["color"], o["shape"])) for o in p["objects"]) for p in programs])
    occupied = lm.sum(-1) == 1   # tokens with exactly one object's motion
    mot = (motion.argmax(-1) == lm.argmax(-1))[occupied].float().mean().item()
    cam = camera_grounding(g)
    cam_acc = float("nan") if cam.shape[-1] == 0 else (cam.mean((1, 2)).argmax(-1) == torch.tensor(
        [V.CAMERAS.index(p["camera"]) for p in programs])).float().mean().item()
    return {"camera_acc": cam_acc, "pair_f1": 2 * prec * rec / max(1e-9, prec + rec), "pair_prec": prec, "pair_rec": rec,
            "video_pairs": (vid == true).all(-1).float().mean().item(), "motion_acc": mot}


def main(out: Path, label: str, over: dict, oracle: bool, tower_only: bool = False) -> None:
    from components.common.config import deep_merge
    from components.common.context import LocalContext
    from components.common.io import read_json
    from components.tricd import backbone as BB
    from components.tricd import benchmark as B
    from components.tricd.config import TricdConfig
    from components.tricd.decode import load_split, predict, run_pass, score

    torch.set_num_threads(1)
    values = {"bench": {"seed": 99}}
    deep_merge(values, over)
    cfg = TricdConfig.for_profile("small", overrides=values)
    bench_key = hashlib.md5(json.dumps(cfg.bench.model_dump(), sort_keys=True).encode()).hexdigest()[:8]
    build = out / f"build-{bench_key}"
    t0 = time.time()
    if not (build / "done.json").exists():
        ctx = LocalContext(out_dir=build)
        B.build_benchmark_stage(cfg, ctx)
        (build / "done.json").write_text(json.dumps(ctx.summary))
        print("built", build, round(time.time() - t0), flush=True)
    d = out / label
    if tower_only:   # the vision tower's pretraining alone, then its grounding quality on dev val
        from components.common.seeds import seed_everything
        from components.tricd import video as V

        rng = seed_everything(cfg.backbone.seed)
        model = BB.make_backbone(cfg.bench, cfg.backbone)
        pre = load_split(build, "pretrain")
        programs = read_json(f"{build}/pretrain_programs.json")
        cut = BB.heldout_start(len(pre.videos))
        labels = torch.from_numpy(np.stack([V.token_labels(p, cfg.bench.size, model.token_px, model.tpatch)
                                            for p in programs[:cut]]))
        scenes = torch.tensor([V.SCENES.index(p["scene"]) for p in programs[:cut]])
        if cfg.backbone.ground_camera:
            scenes = torch.stack([scenes, torch.tensor([V.CAMERAS.index(p["camera"]) for p in programs[:cut]])], 1)
        ctx = LocalContext(out_dir=d)
        BB.pretrain_tower(model, pre.videos, labels, scenes, cut, cfg.backbone, rng, ctx)
        val = load_split(build, "val")
        res = {"label": label, "over": over, "tower_only": True, "train_s": round(time.time() - t0),
               "tower_loss": [round(v, 3) for n, v, _, _ in ctx.history if n == "tower/loss"][-3:],
               **tower_quality(model, val.videos, read_json(f"{build}/val_programs.json"), cfg.bench.size)}
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}), flush=True)
        with open(out / "results.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
        return
    made = {}
    if oracle:   # patch the model the stage builds
        make = BB.make_backbone

        def make_oracle(bench, backbone):
            m = make(bench, backbone)
            pre = load_split(build, "pretrain")
            val = load_split(build, "val")
            oracle_tower(m, [(pre.videos, read_json(f"{build}/pretrain_programs.json")),
                             (val.videos, read_json(f"{build}/val_programs.json"))], bench.size)
            made["model"] = m
            return m
        BB.make_backbone = make_oracle
    else:
        make = BB.make_backbone

        def make_keep(bench, backbone):
            made["model"] = make(bench, backbone)
            return made["model"]
        BB.make_backbone = make_keep
    ctx = LocalContext(out_dir=d, inputs={"build_benchmark": build})
    BB.train_backbone_stage(cfg, ctx)
    t_train = time.time() - t0
    (d / "history.json").write_text(json.dumps(ctx.history))
    model = made["model"].eval()
    val = load_split(build, "val", compound=cfg.backbone.compound)   # v10: the backbone's own tokenizer
    pred = predict(run_pass(model, val.videos, val.text, video_idx=val.video_idx).numpy(), val.tasks)
    s = score(val.qa, pred)
    qa, truth = val.qa, val.qa.answer.to_numpy()
    res = {"label": label, "over": over, "oracle": oracle, "train_s": round(t_train),
           "iso": BB.isolated_macro(s), **{k: s[k] for k in ("acc_s_yn", "acc_c_yn", "acc_s_mc", "acc_c_mc", "macro")},
           "bias_biased": BB.yes_bias(qa, pred, cfg.bench.biased_types),
           "bias_unbiased": BB.yes_bias(qa, pred, cfg.bench.biased_types, False)}
    curve = [(st, round(v, 3)) for n, v, st, _ in ctx.history if n == "val/isolated_macro"]
    res["iso_curve"] = curve
    if not oracle:
        res.update(tower_quality(model, val.videos, read_json(f"{build}/val_programs.json"), cfg.bench.size))
    types = {}
    for t in B.TYPES:
        has = qa.types.apply(lambda x: t in list(x)).to_numpy()
        syn, smc = has & (qa.task == "s_yn").to_numpy(), has & (qa.task == "s_mc").to_numpy()
        types[t] = [round(float((pred[syn] == truth[syn]).mean()), 2), round(float((pred[syn] == "yes").mean()), 2),
                    round(float((pred[smc] == truth[smc]).mean()), 2)]
    res["types_syn_acc_yes_smc"] = types
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}), flush=True)
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else {},
         "--oracle" in sys.argv, "--tower-only" in sys.argv)
