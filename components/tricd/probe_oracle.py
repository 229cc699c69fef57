"""Dev probe of the QA head (issue 39, v3 calibration; dev pretrain seed 2026, dev val seed 99,
never the committed splits). ``--mode oracle`` replaces the vision tower by a linear map of the
scene program's ground truth per visual token (colour-shape, motion, scene, camera): an upper
bound on what the toy language side can learn from perfect visual tokens. Needs a dev data file
written by ``probe_dev_data`` below:
    python -m components.tricd.probe_oracle --data /tmp/dev_b35.pt --mode oracle --steps 800
Rows of CLAIMS.md "Calibration v3"."""
import argparse, time, json
import numpy as np, torch, pandas as pd
from torch import nn
from components.tricd import benchmark as B, video as V
from components.tricd.model import ToyVLLM, build_vocab, encode, answer_loss, grounding_loss
from components.tricd.decode import MAX_TEXT, run_pass, predict, score
from components.common.train import fit
from components.common.seeds import seed_everything


def main():
    global D, a, pv, vv
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/tricd3/dev_b35.pt")
    ap.add_argument("--mode", default="toy")  # toy | oracle
    ap.add_argument("--steps", type=int, default=600); ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--bs", type=int, default=64); ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2); ap.add_argument("--gw", type=float, default=1.0)
    ap.add_argument("--merge", type=int, default=4); ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--align", type=int, default=1); ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--tasks", default="s_yn,c_yn,s_mc,c_mc"); ap.add_argument("--types", default="")
    ap.add_argument("--nvid", type=int, default=0); ap.add_argument("--vfirst", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    D = torch.load(a.data, weights_only=False)
    pv, vv = D["pv"], D["vv"]
    if a.nvid: pv = pv[:a.nvid]
    tasks = a.tasks.split(",")
    keep = lambda it: it["task"] in tasks and (not a.types or set(it["types"]) <= set(a.types.split(","))) and (not a.nvid or it["video"] < a.nvid)
    pitems = [i for i in D["pitems"] if keep(i)]; vitems = [i for i in D["vitems"] if keep(i)]
    vocab = build_vocab(); index = {w: i for i, w in enumerate(vocab)}
    def tens(items):
        return (torch.tensor([encode(q["question"], index, MAX_TEXT) for q in items]),
                torch.tensor([index[q["answer"]] for q in items]), torch.tensor([q["video"] for q in items]))
    ptext, ptgt, pvid = tens(pitems); vtext, vtgt, vvid = tens(vitems)
    vqa = pd.DataFrame(vitems)
    tpx = 4 * a.merge
    glab = torch.from_numpy(np.stack([V.token_labels(p, 32, tpx, a.tp) for p in D["pprog"][:len(pv)]]))
    gscene = torch.tensor([V.SCENES.index(p["scene"]) for p in D["pprog"][:len(pv)]])
    vlab = torch.from_numpy(np.stack([V.token_labels(p, 32, tpx, a.tp) for p in D["vprog"]]))
    vscene = torch.tensor([V.SCENES.index(p["scene"]) for p in D["vprog"]])

    class Oracle(ToyVLLM):
        """Visual tokens from the scene program's ground truth (an upper bound on the LM side)."""
        def setup(self):
            self.oracle = nn.Linear(17 + 4 + len(V.CAMERAS) + 3 * 2, self.tok_emb.embedding_dim)
        def vision_tower(self, video):
            return self.oracle(self._feats)
    def oracle_feats(progs, labs, scenes, idx):
        lab = labs[idx]                                   # (B, T', P, 17)
        sc = torch.nn.functional.one_hot(scenes[idx], 4).float()[:, None, None].expand(*lab.shape[:3], 4)
        cam = torch.nn.functional.one_hot(torch.tensor([V.CAMERAS.index(progs[i]["camera"]) for i in idx.tolist()]), 4).float()[:, None, None].expand(*lab.shape[:3], 4)
        ev = torch.zeros(*lab.shape[:3], 6)
        return torch.cat([lab, sc, cam, ev], -1)

    kwargs = dict(merge=a.merge, align=bool(a.align), tpatch=a.tp)
    base_cls = Oracle if a.mode == "oracle" else ToyVLLM
    class VF(base_cls):
        def forward(self, video, text, visual_weight=None, continuation=None):
            vis = self.vision_tower(video)
            if visual_weight is not None:
                vis = vis * visual_weight.view(vis.shape[0], vis.shape[1], vis.shape[2], 1)
            vis = (vis + self.frame_pos + self.patch_pos).flatten(1, 2)
            txt = self.tok_emb(text) + self.text_pos[-text.shape[1]:]
            x = torch.cat([vis, txt], dim=1)
            for block in self.blocks:
                x = block(x)
            h = self.ln_out(x)
            return self.head(h[:, -1]), h
    cls = VF if a.vfirst else base_cls
    model = cls(len(vocab), 8, 32, 4, a.d, a.layers, 4, MAX_TEXT, **kwargs)
    if a.mode == "oracle": model.setup()
    r = seed_everything(0)
    def batches():
        while True:
            idx = torch.as_tensor(r.choice(len(pitems), size=a.bs, replace=False))
            vids = torch.as_tensor(r.choice(len(pv), size=32, replace=False))
            yield idx, vids
    def loss_fn(m, b):
        idx, vids = b
        if a.mode == "oracle":
            m._feats = oracle_feats(D["pprog"], glab, gscene, pvid[idx])
        loss = answer_loss(m(pv[pvid[idx]], ptext[idx])[0], ptgt[idx])
        if a.gw > 0 and a.mode == "toy":
            loss = loss + a.gw * grounding_loss(m, pv[vids], glab[vids], gscene[vids])
        return loss
    tr_idx = torch.arange(0, len(pitems), max(1, len(pitems) // 1000))
    tqa = pd.DataFrame([pitems[i] for i in tr_idx.tolist()])
    biased = np.array([any(t in ["temporal","camera","action","event"] for t in ts) for ts in vqa.types])
    yn = vqa.task.str.endswith("yn").to_numpy()
    def run(m, videos, text, progs, labs, scenes, vid):
        outs = []
        for s in range(0, len(text), 256):
            if a.mode == "oracle":
                m._feats = oracle_feats(progs, labs, scenes, vid[s:s+256])
            outs.append(run_pass(m, videos[vid[s:s+256]], text[s:s+256]))
        return torch.cat(outs).numpy()
    t0 = time.time()
    def ev(m):
        q = run(m, pv, ptext[tr_idx], D["pprog"], glab, gscene, pvid[tr_idx]); st = score(tqa, predict(q, tqa.task.to_numpy()))
        q = run(m, vv, vtext, D["vprog"], vlab, vscene, vvid); pred = predict(q, vqa.task.to_numpy()); s = score(vqa, pred)
        iso = np.nanmean([s["acc_s_yn"], s["acc_s_mc"]])
        sel = yn & biased
        out = {"TRmacro": st["macro"], "iso": iso, "macro": s["macro"],
               "ybias": (pred[sel] == "yes").mean() - (vqa.answer[sel] == "yes").mean() if sel.any() else float("nan"),
               **{k[4:]: s[k] for k in s if k.startswith("acc_")}, **{k[5:8]: s[k] for k in s if k.startswith("type_")}}
        print(json.dumps({k: round(float(v), 3) for k, v in out.items()}), round(time.time() - t0), flush=True)
        return {"iso": iso}
    rec = fit(model, batches(), loss_fn, steps=a.steps, lr=a.lr, weight_decay=0.01, warmup=a.warmup,
              log_every=max(1, a.steps // 6), eval_fn=ev, eval_every=max(1, a.steps // 6))
    print("loss", [round(x["train/loss"], 3) for x in rec], "s/step", round((time.time() - t0) / a.steps, 3))


if __name__ == "__main__":
    main()
