"""Calibration runs on dev seeds and validation data only (never part of the pipeline).

    python -m components.dagmoe.calibrate CORPUS_DIR OUT.jsonl --tag NAME --seeds 100 101 \
        --variants moe moe_shared --set train.steps=800 --set train.batch_size=32

trains each (variant, seed) exactly as the train stage does (same init, data order and loop),
scores the validation sets on v2's 40k-token prefixes and on the whole sets, and appends one
JSON line per run: the settings, the validation curve, the final losses, and the per-window
losses of the whole sets (for a paired bootstrap of the evaluation noise).
``summarise OUT.jsonl`` prints the paired gains per tag. CLAIMS.md records what was tried.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from components.common.train import fit
from components.common.transformer import lm_loss
from components.dagmoe.config import DagmoeConfig
from components.dagmoe.corpus import load_tokens
from components.dagmoe.model import init_model, training_loss
from components.dagmoe.train import CURVE_BATCH, eval_windows, random_windows

SPLITS = ("val_id", "val_ood")
PREFIX_TOKENS = 40_000  # "_eval" losses: the prefix v2's evaluate scored; "_full": the whole sets


def override(cfg: DagmoeConfig, assignments: list[str]) -> DagmoeConfig:
    data = cfg.model_dump()
    for item in assignments:
        key, value = item.split("=", 1)
        *path, last = key.split(".")
        node = data
        for part in path:
            node = node[part]
        node[last] = json.loads(value) if value[:1] in "[{tf0123456789-." else value
    return DagmoeConfig.model_validate(data)


@torch.no_grad()
def window_losses(model, windows: torch.Tensor, batch_size: int = CURVE_BATCH) -> np.ndarray:
    """Mean loss of each window (n,), so any prefix or resample can be scored afterwards."""
    model.eval()
    out = []
    for start in range(0, len(windows), batch_size):
        chunk = windows[start:start + batch_size]
        logits = model(chunk[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), chunk[:, 1:],
                                                 reduction="none")
        out.append(loss.mean(dim=1))
    return torch.cat(out).numpy()


def run_one(cfg: DagmoeConfig, corpus: Path, variant: str, seed: int) -> dict:
    m, t = cfg.model, cfg.train
    torch.set_num_threads(t.threads)
    vocab = json.loads((corpus / "meta.json").read_text())["vocab_size"]
    tokens = load_tokens(corpus, "train")
    full = {s: eval_windows(load_tokens(corpus, s), m.context, 10**9) for s in SPLITS}
    curve = full["val_id"][: t.curve_tokens // m.context]
    model = init_model(variant, m, vocab, seed, t.common_init)

    def curve_fn(mod):
        return {"val_id": float(window_losses(mod, curve).mean())}

    start = time.perf_counter()
    records = fit(model, random_windows(tokens, m.context, t.batch_size, seed),
                  lambda mod, b: training_loss(mod, b, t.load_balance_coef, t.z_loss_coef),
                  steps=t.steps, lr=t.lr, weight_decay=t.weight_decay, warmup=t.warmup,
                  grad_clip=t.grad_clip, log_every=t.log_every, eval_fn=curve_fn,
                  eval_every=t.curve_every)
    seconds = time.perf_counter() - start
    losses = {s: window_losses(model, w) for s, w in full.items()}
    n_eval = PREFIX_TOKENS // m.context
    return {"variant": variant, "seed": seed, "seconds": seconds,
            "curve": [(r["step"], r["val_id"]) for r in records if "val_id" in r],
            "train_loss": [(r["step"], r["train/loss"]) for r in records],
            **{f"{s}_eval": float(v[:n_eval].mean()) for s, v in losses.items()},
            **{f"{s}_full": float(v.mean()) for s, v in losses.items()},
            "windows": {s: v.round(5).tolist() for s, v in losses.items()}}


def main(argv: list[str]) -> None:
    if argv and argv[0] == "summarise":
        summarise(Path(argv[1]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--variants", nargs="+", default=["moe", "moe_shared"])
    ap.add_argument("--set", dest="sets", action="append", default=[])
    args = ap.parse_args(argv)
    cfg = override(DagmoeConfig(), args.sets)
    if any(s in cfg.seeds for s in args.seeds):
        raise SystemExit("calibrate: dev seeds must differ from the pre-registered seeds")
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    for seed in args.seeds:
        for variant in args.variants:
            same = [r for r in done if r["variant"] == variant and r["seed"] == seed
                    and effective(r["sets"], variant) == effective(args.sets, variant)]
            if same:  # e.g. the plain MoE, which common_init does not change
                row = {**same[0], "tag": args.tag, "sets": args.sets, "reused": same[0]["tag"]}
            else:
                row = {"tag": args.tag, "sets": args.sets, **run_one(cfg, args.corpus, variant, seed)}
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{args.tag} {variant} seed {seed}: id {row['val_id_eval']:.4f} "
                  f"(full {row['val_id_full']:.4f}) ood {row['val_ood_eval']:.4f} "
                  f"{row['seconds']:.0f}s", flush=True)


def effective(sets: list[str], variant: str) -> dict:
    """The settings that change a run of ``variant`` (the plain MoE ignores common_init)."""
    out = dict(item.split("=", 1) for item in sets)
    if variant == "moe":
        out.pop("train.common_init", None)
    return out


def summarise(path: Path, better: str = "moe_shared", worse: str = "moe") -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for tag in dict.fromkeys(r["tag"] for r in rows):
        mine = {(r["variant"], r["seed"]): r for r in rows if r["tag"] == tag}
        seeds = sorted({s for v, s in mine if (better, s) in mine and (worse, s) in mine})
        if not seeds:
            continue
        print(f"== {tag}: {mine[(worse, seeds[0])]['sets']}  seeds {seeds}")
        for v in dict.fromkeys(v for v, _ in mine):
            ids = [mine[(v, s)]["val_id_eval"] for s in seeds if (v, s) in mine]
            secs = [mine[(v, s)]["seconds"] for s in seeds if (v, s) in mine]
            print(f"  {v:10s} id {np.mean(ids):.4f} ± {np.std(ids, ddof=1) if len(ids) > 1 else 0:.4f}"
                  f"  {np.mean(secs):.0f}s/run")
        for key in ("val_id_eval", "val_id_full", "val_ood_eval", "val_ood_full"):
            gain = np.array([mine[(worse, s)][key] - mine[(better, s)][key] for s in seeds])
            sd = gain.std(ddof=1) if len(gain) > 1 else float("nan")
            print(f"  {better} - {worse} gain {key:12s} {gain.mean():+.4f} ± {sd:.4f} "
                  f"wins {(gain > 0).sum()}/{len(gain)}  per seed {np.round(gain, 4).tolist()}")
        # evaluation noise of one seed's paired gain: bootstrap over the windows of the eval prefix
        rng = np.random.default_rng(0)
        noise = []
        for s in seeds:
            a = np.array(mine[(worse, s)]["windows"]["val_id"])
            b = np.array(mine[(better, s)]["windows"]["val_id"])
            d = (a - b)[: len(a)]
            n = min(len(d), 40_000 // 64)
            idx = rng.integers(0, n, (1000, n))
            noise.append(d[:n][idx].mean(axis=1).std())
        print(f"  eval-noise (bootstrap over 40k-token windows) of the ID gain: {np.mean(noise):.4f}")
        curves = {}
        for (v, s), r in mine.items():
            curves.setdefault(v, []).append(dict(r["curve"]))
        for v, cs in curves.items():
            steps = sorted(cs[0])
            print(f"  curve {v:10s} " + " ".join(
                f"{st}:{np.mean([c[st] for c in cs if st in c]):.3f}" for st in steps))


if __name__ == "__main__":
    main(sys.argv[1:])
