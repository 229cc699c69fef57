"""Dev probe of the v8 calibration (CLAIMS.md "Calibration v8"; dev splits only: bench.seed 99).
The language side alone: the toy LM (word embeddings, transformer, head) trained on the QA of
the dev pretrain split over *perfect* word-aligned visual tokens built from the scene programs
(pairs, motion, scene, camera; the ``probe_bind --oracle`` construction plus the camera), and
scored on the dev val split. Isolates "can the LM read visual tokens" from the vision tower.
    python -m components.tricd.probe_lm BUILD_DIR LABEL '{"d_model": 64, ...}'
v9: ``lm`` "reader" (``reader.ReaderVLLM``; ``n_enc``, ``hops``) or "packed" (the causal toy with
its pads after ``<ans>``, ``reader.packed_forward``); default the stage's causal toy.
v10: ``compound`` true: compound colour-shape ids in the questions and on the visual tokens
(``model.tokenize``; CLAIMS "Calibration v10").
v12: ``aux_clause`` w > 0: video-first packed LM, plus w x the cross-entropy of "yes"/"no" = each
clause's truth at the clause's last word (CLAIMS "Calibration v12").
v11: ``mimetic`` true: mimetic attention init (``model.mimetic_init``; CLAIMS "Calibration v11").
Keys: d_model, n_layers, n_heads, steps, lr, yn_first, tasks (list of tasks trained on),
types (list of types trained on), batch, eval_every.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


def oracle_states(programs, size: int, token_px: int, tpatch: int, d: int):
    from components.tricd import video as V

    gs = []
    for p in programs:
        lab = torch.from_numpy(V.token_labels(p, size, token_px, tpatch))   # (T', P, 17)
        scene = torch.zeros(len(V.SCENES))
        scene[V.SCENES.index(p["scene"])] = 1.0
        cam = torch.zeros(len(V.CAMERAS))
        cam[V.CAMERAS.index(p["camera"])] = 1.0
        extra = torch.cat([scene, cam]).expand(lab.shape[0], lab.shape[1], -1)
        gs.append(8.0 * (2 * torch.cat([lab, extra], -1) - 1))
    g = torch.stack(gs)
    return torch.zeros(*g.shape[:3], d), g


def masked_forward(model, text: torch.Tensor, tower) -> torch.Tensor:
    """``ToyVLLM.forward`` (question first, no positive weight) with a key-padding mask: no
    position attends to the left-padding <pad> columns (the toy attends to them; a row's pads
    are then ~30 of its ~56 positions). Same parameters; logits at the answer slot (B, vocab)."""
    import torch.nn.functional as F

    vis = model.project(tower)
    vis = (vis + model.frame_pos + model.patch_pos).flatten(1, 2)
    txt = model.tok_emb(text) + model.text_pos[-text.shape[1]:]
    x = torch.cat([txt[:, :-1], vis, txt[:, -1:]], dim=1)
    b, t, d = x.shape
    keep = torch.cat([text[:, :-1] != 0, torch.ones(b, vis.shape[1] + 1, dtype=torch.bool)], 1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    mask = causal[None] & keep[:, None, :]
    mask = mask | torch.eye(t, dtype=torch.bool)[None]          # a pad row attends to itself only
    for block in model.blocks:
        a = block.attn
        q, k, v = a.qkv(block.ln_attn(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, a.n_heads, d // a.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        x = x + a.proj(y.transpose(1, 2).reshape(b, t, d))
        x = x + block.ffn(block.ln_ffn(x))
    return model.head(model.ln_out(x)[:, -1])


def main(build: Path, label: str, over: dict) -> None:
    from components.common.io import read_json
    from components.common.seeds import seed_everything
    from components.common.train import fit, make_optimizer
    from components.tricd import benchmark as B
    from components.tricd.backbone import frozen_tower_loss, isolated_macro, yes_bias
    from components.tricd.decode import MAX_TEXT, load_split, predict, score
    from components.tricd.model import ToyVLLM, answer_loss, build_vocab

    torch.set_num_threads(1)
    o = {"d_model": 64, "n_layers": 2, "n_heads": 4, "steps": 2400, "lr": 2e-3, "yn_first": 0.5,
         "batch": 64, "eval_every": 400, "seed": 3, "tasks": list(B.TASKS), "types": list(B.TYPES),
         "warmup": 100, "wd": 0.01}
    o.update(over)
    rng = seed_everything(o["seed"])
    t0 = time.time()
    cp = bool(o.get("compound"))
    pre, val = load_split(build, "pretrain", compound=cp), load_split(build, "val", compound=cp)
    cls, extra = ToyVLLM, {}
    if o.get("lm") == "reader":   # v9: bidirectional question encoder + co-attention hops
        from components.tricd.reader import ReaderVLLM
        cls, extra = ReaderVLLM, {"n_enc": o.get("n_enc", 2), "hops": o.get("hops", 2)}
    elif o.get("lm") == "packed":  # v9: causal toy, pads after <ans>
        from components.tricd.reader import PackedVLLM
        cls = PackedVLLM
    model = cls(len(build_vocab(cp)), 8, 32, 4, o["d_model"], o["n_layers"], o["n_heads"], MAX_TEXT,
                merge=4, align=True, tpatch=2, camera=True, feat_scale=0.0, compound=cp,
                video_first=bool(o.get("video_first")), **extra)
    if o.get("mimetic"):   # v11: mimetic attention init (``model.mimetic_init``)
        from components.tricd.model import mimetic_init
        mimetic_init(model.blocks, torch.Generator().manual_seed(o["seed"]), qk=tuple(o.get("mim_qk", (0.7, 0.7))),
                     vo=tuple(o.get("mim_vo", (0.4, 0.4))))
    for p in [*model.patch_embed.parameters(), *model.ground_head.parameters(), *model.merger.parameters()]:
        p.requires_grad_(False)
    tp = oracle_states(read_json(f"{build}/pretrain_programs.json"), 32, model.token_px, model.tpatch, o["d_model"])
    tv = oracle_states(read_json(f"{build}/val_programs.json"), 32, model.token_px, model.tpatch, o["d_model"])
    cut = int(round(len(pre.videos) * 0.9))
    def regen(data, split, n, tasks, seed):   # more QA items per video (same programs; the split's own bias)
        from types import SimpleNamespace

        from components.tricd.backbone import more_pretrain_qa

        progs = read_json(f"{build}/{split}_programs.json")
        bench = SimpleNamespace(bias=o.get("bias", 0.35), biased_types=["temporal", "camera", "action", "event"],
                                adversarial_rate=0.67)
        more_pretrain_qa(data, progs, len(progs), n, bench, seed, cp, clause_aux=bool(o.get("aux_clause")),
                         split=split, tasks=tasks)
        print(label, split, "qa", len(data.qa), round(time.time() - t0), flush=True)

    if o.get("qa_per_task"):
        regen(pre, "pretrain", o["qa_per_task"], o["tasks"], o["seed"] + 1000)
    if o.get("val_qa_per_task"):   # a larger dev val (same 150 dev val videos, balanced as val)
        regen(val, "val", o["val_qa_per_task"], list(B.TASKS), 4242)
    qa = pre.qa
    keep = (pre.video_idx.numpy() < cut) & qa.task.isin(o["tasks"]).to_numpy() \
        & qa.types.apply(lambda t: all(x in o["types"] for x in t)).to_numpy()
    rows = np.flatnonzero(keep)
    yn_rows = rows[qa.task.to_numpy()[rows].astype(str) != "s_mc"]
    yn_rows = yn_rows[qa.task.to_numpy()[yn_rows].astype(str) != "c_mc"]
    yn_steps = int(round(o["yn_first"] * o["steps"]))

    aux_w = float(o.get("aux_clause", 0.0))
    if aux_w and not (o.get("video_first") and o.get("lm") == "packed" and o.get("qa_per_task")):
        raise ValueError("aux_clause needs video_first, lm packed and qa_per_task (regenerated items)")
    first = o.get("first_types")   # curriculum: the first ``first_steps`` steps on these types only
    if first:
        first_rows = rows[qa.types.iloc[rows].apply(lambda t: all(x in first for x in t)).to_numpy()]
        first_rows = np.intersect1d(first_rows, yn_rows)

    def batches():
        step = 0
        while True:
            pool = yn_rows if step < yn_steps else rows
            if first and step < o["first_steps"]:
                pool = first_rows
            step += 1
            idx = torch.as_tensor(rng.choice(pool, size=o["batch"], replace=False))
            yield pre.video_idx[idx], pre.text[idx], pre.target[idx], (pre.aux[idx] if aux_w else None)

    def trim(text):
        if not o.get("trim"):
            return text
        n = int((text != 0).sum(1).max())
        return text[:, -n:]

    def loss_fn(m, b):
        v, text, target, aux = b
        if o.get("mask"):
            return answer_loss(masked_forward(m, text, (tp[0][v], tp[1][v])), target)
        text = trim(text)   # v12 clause loss: shared with the stage (``backbone.frozen_tower_loss``)
        return frozen_tower_loss(m, (v, text, target, *([aux] if aux_w else [])), tp, aux_w)

    answer_ids = torch.tensor([{w: i for i, w in enumerate(build_vocab(cp))}[w] for w in ("yes", "no", "A", "B", "C")])

    def evaluate(m):
        with torch.no_grad():
            def one(s):
                st = (tv[0][val.video_idx[s:s + 256]], tv[1][val.video_idx[s:s + 256]])
                if o.get("mask"):
                    return masked_forward(m, val.text[s:s + 256], st)[:, answer_ids]
                return m(None, trim(val.text[s:s + 256]), tower=st)[0][:, answer_ids]
            q = torch.cat([one(s) for s in range(0, len(val.text), 256)])
        pred = predict(q.numpy(), val.tasks)
        s = score(val.qa, pred)
        return s, pred

    curve = []

    def eval_fn(m):
        s, _ = evaluate(m)
        curve.append((len(curve) + 1, round(isolated_macro(s), 3), round(s["acc_s_yn"], 3), round(s["acc_s_mc"], 3)))
        print(label, "eval", curve[-1], round(time.time() - t0), flush=True)
        return {"val/iso": isolated_macro(s)}

    trainable = [p for p in model.parameters() if p.requires_grad]
    recs = fit(model, batches(), loss_fn, steps=o["steps"],
               optimizer=make_optimizer(trainable, lr=o["lr"], weight_decay=o["wd"]), warmup=o["warmup"],
               log_every=max(1, o["steps"] // 20), eval_fn=eval_fn, eval_every=o["eval_every"])
    s, pred = evaluate(model)
    truth = val.qa.answer.to_numpy()
    types = {}
    for t in B.TYPES:
        has = val.qa.types.apply(lambda x: t in list(x)).to_numpy()
        syn, smc = has & (val.qa.task == "s_yn").to_numpy(), has & (val.qa.task == "s_mc").to_numpy()
        types[t] = [round(float((pred[syn] == truth[syn]).mean()), 2), round(float((pred[syn] == "yes").mean()), 2),
                    round(float((pred[smc] == truth[smc]).mean()), 2)]
    res = {"label": label, "over": over, "s": round(time.time() - t0), "iso": isolated_macro(s),
           **{k: s[k] for k in ("acc_s_yn", "acc_c_yn", "acc_s_mc", "acc_c_mc", "macro")},
           "bias_biased": yes_bias(val.qa, pred, ["temporal", "camera", "action", "event"]),
           "loss": [round(r["train/loss"], 3) for r in recs][::4], "curve": curve, "types": types}
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}), flush=True)
    with open(build.parent / "lm_results.jsonl", "a") as f:
        f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
