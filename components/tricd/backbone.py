"""Train the toy video LLM on the (biased) pretrain split; evaluate it as the base decoder."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from components.tricd.decode import MAX_TEXT, load_split, predict, run_pass, score
from components.tricd.benchmark import caption
from components.tricd import video as V
from components.tricd.model import (CAPTION_PROMPT, ToyVLLM, answer_loss, build_vocab, caption_loss, mimetic_init,
                                   encode, encode_caption, grounding_loss)

HELDOUT_SHARE = 0.1   # last 10% of pretrain videos: a held-out set from the biased distribution


def make_backbone(bench, backbone) -> ToyVLLM:
    from components.tricd.reader import PackedVLLM, ReaderVLLM

    cls, extra = ToyVLLM, {}
    if backbone.lm == "reader":
        cls, extra = ReaderVLLM, {"n_enc": backbone.n_enc, "hops": backbone.hops}
    elif backbone.lm == "packed":
        cls = PackedVLLM
    elif backbone.lm != "causal":
        raise ValueError(f"backbone.lm must be causal, packed or reader, not {backbone.lm!r}")
    if backbone.mimetic and backbone.lm == "reader":
        raise ValueError("backbone.mimetic needs a causal language side (lm causal or packed), not the reader")
    model = cls(len(build_vocab(backbone.compound)), bench.frames, bench.size, backbone.patch, backbone.d_model,
                   backbone.n_layers, backbone.n_heads, MAX_TEXT, merge=backbone.merge,
                   align=backbone.align, tpatch=backbone.tpatch, video_first=backbone.video_first,
                   context=backbone.context, camera=backbone.ground_camera,
                   pixel_colour=backbone.pixel_colour, pos_weight=backbone.ground_pos_weight,
                   token_weight=backbone.ground_token_weight, feat_scale=backbone.feat_scale,
                   compound=backbone.compound, **extra)
    if backbone.mimetic:   # v11: attention starts as a lookup of similar tokens (CLAIMS "Calibration v11")
        mimetic_init(model.blocks, torch.Generator().manual_seed(backbone.seed))
    return model


def load_backbone(path, bench, backbone) -> ToyVLLM:
    from components.common.io import load_torch

    model = make_backbone(bench, backbone)
    model.load_state_dict(load_torch(path))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def heldout_start(n_videos: int) -> int:
    return int(round(n_videos * (1 - HELDOUT_SHARE)))


def pretraining_loss(m, batch, prompt, grounding_weight: float, caption_weight: float):
    """Answer loss, plus the vision tower's grounding loss and the captioning loss when weighted.
    ``batch``: (video, text, target, caption video, caption, grounding labels, scene)."""
    video, text, target, cap_video, cap, pair, scene = batch
    loss = answer_loss(m(video, text)[0], target)
    if grounding_weight > 0:
        loss = loss + grounding_weight * grounding_loss(m, cap_video, pair, scene)
    if caption_weight > 0:
        cap = cap[:, :int((cap != 0).sum(1).max())]
        logits = m(cap_video, prompt.expand(len(cap), -1), continuation=cap)[0]
        loss = loss + caption_weight * caption_loss(logits, cap)
    return loss


def pretrain_tower(model, videos, labels, scenes, n_videos: int, bb, rng, ctx):
    """Phase 1 of the two-phase pretraining (``tower_steps`` > 0): the vision tower alone (patch
    embedding, merger, grounding head) on its grounding targets, then frozen, as a VLLM's vision
    encoder is pretrained before and kept frozen while the language model learns (LLaVA).
    Returns the cached tower states of the first ``n_videos`` videos (feats, grounding logits):
    the QA phase then costs one language-model pass a step, several times cheaper."""
    from components.common.train import fit, make_optimizer

    params = [*model.patch_embed.parameters(), *model.ground_head.parameters(),
              *(model.merger.parameters() if model.merger is not None else [])]

    def batches():
        while True:
            v = torch.as_tensor(rng.choice(n_videos, size=bb.tower_batch, replace=False))
            yield videos[v], labels[v], scenes[v]

    fit(model, batches(), lambda m, b: grounding_loss(m, *b), steps=bb.tower_steps,
        optimizer=make_optimizer(params, lr=bb.lr, weight_decay=bb.weight_decay), warmup=bb.warmup,
        ctx=ctx, log_every=max(1, bb.tower_steps // 10), prefix="tower")
    for p in params:
        p.requires_grad_(False)
    with torch.no_grad():
        states = [model.tower_state(videos[s:s + 256]) for s in range(0, n_videos, 256)]
    return torch.cat([f for f, _ in states]), torch.cat([g for _, g in states])


def more_pretrain_qa(data, programs, n_videos: int, qa_per_task: int, bench, seed: int,
                     compound: bool = False, clause_aux: bool = False, split: str = "pretrain",
                     tasks=None) -> None:
    """v9 (``backbone.pretrain_qa_per_task`` > 0): replace the pretrain split's QA of the first
    ``n_videos`` videos by ``qa_per_task`` fresh items per task and video, drawn from the same
    scene programs with the split's own bias (the stage's ~2,200 items a type were memorised,
    CLAIMS "Calibration v8"). ``data`` (a ``decode.Split``) is changed in place. ``bench``: any
    object with ``bias``, ``biased_types``, ``adversarial_rate``; ``split`` and ``tasks`` (default
    all) let the dev probe ``probe_lm`` regenerate other splits the same way."""
    import pandas as pd

    from components.tricd import benchmark as Bm

    g = np.random.default_rng(seed)
    items = []
    for v, p in enumerate(programs[:n_videos]):
        for task in (Bm.TASKS if tasks is None else [t for t in Bm.TASKS if t in tasks]):
            for _ in range(qa_per_task):
                it = Bm.make_item(p, task, split, g, bias=bench.bias, biased_types=bench.biased_types,
                                  adversarial_rate=bench.adversarial_rate)
                if it is not None:
                    it.update(video=v, compositional=task.startswith("c_"))
                    items.append(it)
    index = {w: i for i, w in enumerate(build_vocab(compound))}
    data.qa = pd.DataFrame(items)
    data.text = torch.tensor([encode(q, index, MAX_TEXT, compound) for q in data.qa.question], dtype=torch.long)
    data.target = torch.tensor([index[a] for a in data.qa.answer], dtype=torch.long)
    data.video_idx = torch.tensor(data.qa.video.to_numpy(), dtype=torch.long)
    if clause_aux:   # v12: "yes"/"no" = each clause's truth at its last word (``benchmark.clause_targets``)
        data.aux = torch.tensor([Bm.clause_targets(it, programs[it["video"]], index, MAX_TEXT, compound)
                                 for it in items], dtype=torch.long)


def frozen_tower_loss(m, batch, tower, aux_weight: float = 0.0) -> torch.Tensor:
    """QA loss on cached tower states: ``batch`` = (video index, text, target[, clause targets]).
    v12 ``aux_weight`` > 0 (video-first packed LM): plus that weight times the cross-entropy of
    every clause's truth at its last word (text column j sits at ``n_visual + j``)."""
    vids, text, target, *aux = batch
    width = text.shape[1]
    if getattr(m, "pad_free", False):   # v9 language sides ignore pads: drop the shared pad columns
        width = int((text != 0).sum(1).max())
        text = text[:, -width:]
    logits, h = m(None, text, tower=(tower[0][vids], tower[1][vids]))
    loss = answer_loss(logits, target)
    if aux_weight:
        cols = m.head(h[:, m.n_visual:m.n_visual + width - 1])
        loss = loss + aux_weight * F.cross_entropy(cols.flatten(0, 1), aux[0][:, -width:-1].flatten(),
                                                   ignore_index=-100)
    return loss


def train_backbone_stage(cfg, ctx) -> None:
    from components.common.io import read_json, save_torch, write_json_atomic
    from components.common.seeds import seed_everything
    from components.common.train import fit, make_optimizer

    if cfg.paper.enabled:   # the paper's backbone is a pretrained video LLM, used frozen
        from components.common.hf_models import read_config

        conf = read_config(cfg.paper.model_path)
        write_json_atomic(ctx.out_dir / "backbone.json", {"model_path": str(cfg.paper.model_path),
                                                           "model_type": conf.get("model_type")})
        ctx.write_metrics({"trained": 0.0})
        return
    # One backbone for every seed: it stands in for a fixed pretrained VLLM; the seeds of the
    # criteria vary the TriCD policy (router/gater init, REINFORCE sampling), as in the paper.
    bb = cfg.backbone
    if bb.aux_clause and not (bb.video_first and bb.lm == "packed" and bb.pretrain_qa_per_task and bb.tower_steps):
        raise ValueError("backbone.aux_clause needs backbone.video_first, lm 'packed', pretrain_qa_per_task > 0 "
                         "and tower_steps > 0")
    rng = seed_everything(cfg.backbone.seed)
    bench_dir = ctx.inputs["build_benchmark"]
    data = load_split(bench_dir, "pretrain", compound=cfg.backbone.compound)
    cut = heldout_start(len(data.videos))
    model = make_backbone(cfg.bench, cfg.backbone)

    # captioning pretraining (as VLLMs are pretrained): dense supervision of what is in the
    # video, on the same pretrain videos; QA answers alone learn little beyond the prior here
    programs = read_json(f"{bench_dir}/pretrain_programs.json")
    if bb.pretrain_qa_per_task:   # v9: many more QA items from the same (training) programs
        more_pretrain_qa(data, programs, cut, bb.pretrain_qa_per_task, cfg.bench, cfg.backbone.seed + 1000,
                         bb.compound, clause_aux=bool(bb.aux_clause))
    rows = np.flatnonzero(data.video_idx.numpy() < cut)
    index = {w: i for i, w in enumerate(build_vocab(bb.compound))}
    captions = torch.tensor([encode_caption(caption(p), index) for p in programs[:cut]])
    prompt = torch.tensor([encode(CAPTION_PROMPT, index, len(CAPTION_PROMPT.split()) + 1)])
    # grounding targets of the vision tower (as a VLLM's vision encoder is pretrained first)
    pairs = torch.from_numpy(np.stack([V.token_labels(p, cfg.bench.size, model.token_px, model.tpatch)
                                       for p in programs[:cut]]))
    scenes = torch.tensor([V.SCENES.index(p["scene"]) for p in programs[:cut]])
    if bb.ground_camera:   # v7: the tower also learns the camera operation (scene, camera pairs)
        scenes = torch.stack([scenes, torch.tensor([V.CAMERAS.index(p["camera"]) for p in programs[:cut]])], 1)

    # curriculum: the first ``yn_first`` share of the steps draws yes/no items only (the
    # oracle probes in CLAIMS.md: mixed with multiple choice, the QA head stays at the prior)
    yn_rows = rows[data.qa.task.to_numpy()[rows] != "s_mc"]
    yn_rows = yn_rows[data.qa.task.to_numpy()[yn_rows] != "c_mc"]
    yn_steps = int(round(bb.yn_first * bb.steps))

    tower = pretrain_tower(model, data.videos, pairs, scenes, cut, bb, rng, ctx) if bb.tower_steps else None

    def batches():
        step = 0
        while True:
            pool = yn_rows if step < yn_steps else rows
            step += 1
            idx = torch.as_tensor(rng.choice(pool, size=bb.batch_size, replace=False))
            if tower is not None:   # the tower is frozen: its cached states stand in for the videos
                aux = (data.aux[idx],) if bb.aux_clause else ()
                yield (data.video_idx[idx], data.text[idx], data.target[idx], *aux)
                continue
            vids = torch.as_tensor(rng.choice(cut, size=bb.caption_batch, replace=False))
            yield (data.videos[data.video_idx[idx]], data.text[idx], data.target[idx],
                   data.videos[vids], captions[vids], pairs[vids], scenes[vids])

    def loss_fn(m, batch):
        if tower is not None:
            return frozen_tower_loss(m, batch, tower, bb.aux_clause)
        return pretraining_loss(m, batch, prompt, bb.grounding_weight, bb.caption_weight)

    val = load_split(bench_dir, "val", compound=bb.compound)

    def eval_fn(m):
        q = run_pass(m, val.videos, val.text, video_idx=val.video_idx)
        scores = score(val.qa, predict(q.numpy(), val.tasks))
        return {"val/macro": scores["macro"], "val/isolated_macro": isolated_macro(scores),
                "val/acc_s_yn": scores["acc_s_yn"], "val/acc_s_mc": scores["acc_s_mc"]}

    trainable = [p for p in model.parameters() if p.requires_grad]
    log_every = max(1, bb.steps // 30)
    records = fit(model, batches(), loss_fn, steps=bb.steps,
                  optimizer=make_optimizer(trainable, lr=bb.lr, weight_decay=bb.weight_decay),
                  warmup=bb.warmup, ctx=ctx, log_every=log_every, eval_fn=eval_fn,
                  eval_every=6 * log_every)   # ~5 val evals (+ the last step); fit evaluates on log steps only
    save_torch(ctx.out_dir / "backbone.pt", model.state_dict())
    n_params = sum(p.numel() for p in model.parameters())
    ctx.write_metrics({"final_loss": records[-1]["train/loss"], "val_macro": records[-1]["val/macro"],
                       "n_params": n_params, "n_train_qa": int(len(rows))})


def isolated_macro(scores: dict) -> float:
    """Macro accuracy over the two isolated (single-type) tasks, S-YN and S-MC."""
    return (scores["acc_s_yn"] + scores["acc_s_mc"]) / 2


def yes_bias(qa, pred, biased_types, biased: bool = True) -> float:
    """Predicted minus true "yes" rate on yes/no items that do (or do not) involve a biased type:
    how far the model leans on the language prior it was pretrained with."""
    yn = qa.task.str.endswith("yn").to_numpy()
    has = np.array([any(t in biased_types for t in types) for types in qa.types])
    rows = yn & (has if biased else ~has)
    return float((np.asarray(pred)[rows] == "yes").mean() - (qa.answer.to_numpy()[rows] == "yes").mean())


def eval_base_stage(cfg, ctx) -> None:
    """Plain decoding (one pass, constrained argmax) on test, val and (toy backbone) the biased
    held-out set."""
    from components.common.io import write_json_atomic, write_table
    from components.tricd.backbones import open_backbone

    bench_dir = ctx.inputs["build_benchmark"]
    model = open_backbone(cfg, ctx.inputs["train_backbone"])
    results = {}
    for split in ("test", "val") + (() if cfg.paper.enabled else ("pretrain",)):
        data = load_split(bench_dir, split, backbone=model)
        if split == "pretrain":   # only the held-out videos: the biased distribution, unseen
            keep = (data.video_idx >= heldout_start(len(data.videos))).numpy()
            data.qa, data.text = data.qa[keep].reset_index(drop=True), data.text[keep]
            data.video_idx = data.video_idx[keep]
            split = "heldout_biased"
        q = run_pass(model, data.videos, data.text, video_idx=data.video_idx).numpy()
        pred = predict(q, data.tasks)
        results[split] = score(data.qa, pred)
        if split == "test":
            write_table(ctx.out_dir / "preds_base.parquet",
                        {"qa_id": data.qa.qa_id.tolist(), "pred": pred.tolist(),
                         "answer": data.qa.answer.tolist()})
            # the language prior, read off the predictions: yes-rate on YN test items
            yn = data.qa.task.str.endswith("yn").to_numpy()
            results["test_pred_yes_rate"] = float((pred[yn] == "yes").mean())
        if split == "val":   # the premises, measured on validation only
            results["val_isolated_macro"] = isolated_macro(results["val"])
            results["val_yes_bias_biased"] = yes_bias(data.qa, pred, cfg.bench.biased_types)
            results["val_yes_bias_unbiased"] = yes_bias(data.qa, pred, cfg.bench.biased_types, False)
    write_json_atomic(ctx.out_dir / "metrics_base.json", results)
    ctx.write_metrics({"test_macro": results["test"]["macro"], "val_macro": results["val"]["macro"],
                       **({} if cfg.paper.enabled else {"heldout_biased_macro": results["heldout_biased"]["macro"]}),
                       **{f"test_{k}": results["test"][k] for k in ("acc_s_yn", "acc_c_yn", "acc_s_mc", "acc_c_mc")},
                       "test_compositional": results["test"]["compositional"],
                       "test_isolated": results["test"]["isolated"],
                       "test_pred_yes_rate": results["test_pred_yes_rate"],
                       "val_isolated_macro": results["val_isolated_macro"],
                       "val_yes_bias_biased": results["val_yes_bias_biased"],
                       "val_yes_bias_unbiased": results["val_yes_bias_unbiased"]})
