"""Dev probe of multiple choice (v6; CLAIMS.md "Calibration v6"; dev splits only). Reads a dev
pipeline folder of ``probe_dev`` (build/ and backbone/, bench.seed 99) and prints, on the dev val
split: the letter decoding per task; the same MC items answered option-wise (each statement asked
as its own S-YN question, the true one = largest yes-minus-no logit; "none" / "all" from the sign);
and per evidence type S-YN accuracy / yes-rate next to S-MC letter / option-wise accuracy.
    python -m components.tricd.probe_mc /tmp/tricd5-dev-qf '{}'"""
import json
import sys

import numpy as np
import torch

from components.tricd import benchmark as B
from components.tricd.backbone import load_backbone
from components.tricd.config import TricdConfig
from components.tricd.decode import MAX_TEXT, load_split, predict, run_pass, score
from components.tricd.model import build_vocab, encode


def option_wise(model, val, pred) -> np.ndarray:
    """MC answers from the yes/no logits of each statement (threshold 0 for the adversarial C)."""
    index = {w: i for i, w in enumerate(build_vocab())}
    mc = np.flatnonzero(~val.qa.task.str.endswith("yn").to_numpy())
    rows, texts, spans = [], [], []
    for r in mc:
        it = val.qa.iloc[r]
        n = 3 if it.adversarial == "" else 2
        spans.append((len(rows), n))
        for o in list(it.options)[:n]:
            rows.append(r)
            texts.append(encode(f"is it true that {o} ?", index, MAX_TEXT))
    q = run_pass(model, val.videos, torch.tensor(texts), video_idx=val.video_idx[torch.tensor(rows)]).numpy()
    l, out = q[:, 0] - q[:, 1], pred.copy()
    for r, (s, n) in zip(mc, spans):
        it, li = val.qa.iloc[r], l[s:s + n]
        ans = "ABC"[int(np.argmax(li))]
        if (it.adversarial == "none" and li.max() < 0) or (it.adversarial == "all" and li.min() > 0):
            ans = "C"
        out[r] = ans
    return out


def main(dev: str, over: dict) -> None:
    torch.set_num_threads(1)
    cfg = TricdConfig.for_profile("small", overrides={"bench": {"seed": 99}, **over})
    model = load_backbone(f"{dev}/backbone/backbone.pt", cfg.bench, cfg.backbone)
    val = load_split(f"{dev}/build", "val")
    pred = predict(run_pass(model, val.videos, val.text, video_idx=val.video_idx).numpy(), val.tasks)
    out = option_wise(model, val, pred)
    qa, truth = val.qa, val.qa.answer.to_numpy()
    for name, p in (("letter", pred), ("option-wise", out)):
        s = score(qa, p)
        print(name, {k: round(s[k], 3) for k in ("acc_s_yn", "acc_c_yn", "acc_s_mc", "acc_c_mc", "macro")},
              "iso", round((s["acc_s_yn"] + s["acc_s_mc"]) / 2, 3))
    for t in B.TYPES:
        has = qa.types.apply(lambda x: t in list(x)).to_numpy()
        syn, smc = has & (qa.task == "s_yn").to_numpy(), has & (qa.task == "s_mc").to_numpy()
        print(f"{t:9s} S-YN {(pred[syn] == truth[syn]).mean():.2f} (n {syn.sum()}, yes-rate "
              f"{(pred[syn] == 'yes').mean():.2f})  S-MC letter {(pred[smc] == truth[smc]).mean():.2f} "
              f"option-wise {(out[smc] == truth[smc]).mean():.2f} (n {smc.sum()})")


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
