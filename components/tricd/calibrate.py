"""Dev calibration probe (dev pretrain seed 2026, dev val seed 99; never the test split):
train the toy backbone with the given knobs and print the premise quantities on val.
Usage: python components/tricd/calibrate.py --steps 800 --npre 1500 --size 32 --patch 4 --merge 4 --gw 1 --align 1 --tp 2
(the runs in CLAIMS.md "Calibration"). Part 2 (`--grounding-probe`) is not included: see CLAIMS.md."""
import argparse, time, json
import numpy as np, torch, pandas as pd
from components.tricd import benchmark as B
from components.tricd.backbone import pretraining_loss
from components.tricd.model import ToyVLLM, build_vocab, encode, encode_caption, CAPTION_PROMPT
from components.tricd.decode import MAX_TEXT, run_pass, predict, score
from components.common.train import fit
from components.common.seeds import seed_everything
ap = argparse.ArgumentParser()
ap.add_argument("--size", type=int, default=16); ap.add_argument("--world", type=int, default=24)
ap.add_argument("--patch", type=int, default=4); ap.add_argument("--steps", type=int, default=600)
ap.add_argument("--npre", type=int, default=1200); ap.add_argument("--nval", type=int, default=150)
ap.add_argument("--d", type=int, default=64); ap.add_argument("--layers", type=int, default=2); ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--bias", type=float, default=0.35); ap.add_argument("--lr", type=float, default=2e-3)
ap.add_argument("--bs", type=int, default=64); ap.add_argument("--cb", type=int, default=32)
ap.add_argument("--frames", type=int, default=8); ap.add_argument("--merge", type=int, default=1)
ap.add_argument("--gw", type=float, default=0.0); ap.add_argument("--align", type=int, default=0); ap.add_argument("--tp", type=int, default=1); ap.add_argument("--qa", type=int, default=2); ap.add_argument("--cw", type=float, default=1.0)
a = ap.parse_args()
torch.set_num_threads(1)
kw = dict(frames=a.frames, size=a.size, world=a.world, bias=a.bias,
          biased_types=["temporal", "camera", "action", "event"], adversarial_rate=0.67)
t0 = time.time()
rng = np.random.default_rng(2026)
pv, pprog, pitems = B.build_split("pretrain", a.npre, a.qa, rng, **kw)
vv, vprog, vitems = B.build_split("val", a.nval, 1, np.random.default_rng(99), **kw)
print("build", round(time.time() - t0, 1), "s", len(pitems), len(vitems), flush=True)
vocab = build_vocab(); index = {w: i for i, w in enumerate(vocab)}
def tens(items):
    text = torch.tensor([encode(q["question"], index, MAX_TEXT) for q in items])
    tgt = torch.tensor([index[q["answer"]] for q in items]); vid = torch.tensor([q["video"] for q in items])
    return text, tgt, vid
ptext, ptgt, pvid = tens(pitems); vtext, vtgt, vvid = tens(vitems)
pv, vv = torch.from_numpy(pv), torch.from_numpy(vv)
vqa = pd.DataFrame(vitems)
caps = torch.tensor([encode_caption(B.caption(p), index) for p in pprog])
prompt = torch.tensor([encode(CAPTION_PROMPT, index, len(CAPTION_PROMPT.split()) + 1)])
kwargs = {"merge": a.merge, "align": bool(a.align), "tpatch": a.tp}
from components.tricd import video as V
tp = a.patch * a.merge
glab = torch.from_numpy(np.stack([V.token_labels(p, a.size, tp, a.tp) for p in pprog]))
gscene = torch.tensor([V.SCENES.index(p["scene"]) for p in pprog])
model = ToyVLLM(len(vocab), a.frames, a.size, a.patch, a.d, a.layers, a.heads, MAX_TEXT, **kwargs)
r = seed_everything(0)
def batches():
    while True:
        idx = torch.as_tensor(r.choice(len(pitems), size=a.bs, replace=False))
        vids = torch.as_tensor(r.choice(a.npre, size=a.cb, replace=False))
        yield pv[pvid[idx]], ptext[idx], ptgt[idx], pv[vids], caps[vids], glab[vids], gscene[vids]
def loss_fn(m, b):
    return pretraining_loss(m, b, prompt, a.gw, a.cw)
biased = np.array([any(t in kw["biased_types"] for t in ts) for ts in vqa.types])
yn = vqa.task.str.endswith("yn").to_numpy()
tr_idx = np.arange(0, len(pitems), 20)
tqa = pd.DataFrame([pitems[i] for i in tr_idx])
def ev_train(m):
    q = run_pass(m, pv[pvid[tr_idx]], ptext[tr_idx]).numpy(); pred = predict(q, tqa.task.to_numpy()); s = score(tqa, pred)
    g = m.grounding_logits(m.encoder(pv[:64].float()))
    lab = glab[:64]
    hit = ((g[..., :lab.shape[-1]] > 0).float() == lab).float()
    pos = lab > 0
    print("TRAIN", json.dumps({k: round(float(v), 3) for k, v in s.items() if k.startswith(("acc", "type", "macro"))}),
          "ground_recall", round(float(hit[pos].mean()), 3), "ground_spec", round(float(hit[~pos].mean()), 3), flush=True)
def ev(m):
    ev_train(m)
    q = run_pass(m, vv[vvid], vtext).numpy(); pred = predict(q, vqa.task.to_numpy()); s = score(vqa, pred)
    iso = (s["acc_s_yn"] + s["acc_s_mc"]) / 2
    sel = yn & biased
    bias = (pred[sel] == "yes").mean() - (vqa.answer[sel] == "yes").mean()
    sel2 = yn & ~biased
    bias_u = (pred[sel2] == "yes").mean() - (vqa.answer[sel2] == "yes").mean()
    out = {"iso": iso, "macro": s["macro"], "yesbias_b": bias, "yesbias_u": bias_u,
           **{k: s[k] for k in ("acc_s_yn", "acc_s_mc", "acc_c_yn", "acc_c_mc")},
           **{k: round(s[k], 3) for k in s if k.startswith("type_")}}
    print(json.dumps({k: round(float(v), 3) for k, v in out.items()}), round(time.time() - t0, 1), flush=True)
    return {"iso": iso}
t1 = time.time()
rec = fit(model, batches(), loss_fn, steps=a.steps, lr=a.lr, weight_decay=0.01, warmup=50, log_every=max(1, a.steps // 6),
    eval_fn=ev, eval_every=max(1, a.steps // 6))
print("train s", round(time.time() - t1, 1), "per step", round((time.time() - t1) / a.steps, 3))
print([round(r["train/loss"], 3) for r in rec])
