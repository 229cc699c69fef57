"""Does W keep a one-voxel landmark through the spin? (validation worlds, dev seed 100; the test
worlds are never read). Re-uses a dev project's rollout_env / train_vae3d / encode_latents
(argv[1]), runs the real C, P and baseline stages once (seed 100) and W per variant
(argv[3:]: "base" or "residual"), then the persist / persist_w0 / baseline rows of rollout_eval on
the validation probe spins: probe score and state probe score (what W's decoded state keeps).
'identity' = the encoded true w_0 held fixed (the spin does not move the crop): W's ceiling."""
import sys, time
from pathlib import Path
from types import SimpleNamespace

import numpy as np, torch

from components.common.context import LocalContext
from components.common.io import load_npz
from components.persist.config import PersistConfig
from components.persist.data import spin_steps
from components.persist.evaluate import (LandmarkColour, Models, probe_score, probe_windows, rollout,
                                         state_probe_score)
from components.persist.train import (decode_latents, encode_crops, train_camera_model_stage,
                                      train_pixel_model_stage, train_world_model_stage)

torch.set_num_threads(1)
SEED = 100


def run_stage(fn, cfg, inputs, out: Path, item):
    if (out / "info.done").exists():
        return
    ctx = LocalContext(out_dir=out, inputs=inputs, item=item)
    t = time.time()
    fn(cfg, ctx)
    print(out.name, {k: v for k, v in ctx.summary.items() if not isinstance(v, list)}, flush=True)
    (out / "info.done").write_text("ok")
    print(f"  {fn.__name__} {out.name} {time.time() - t:.0f}s", flush=True)


def main():
    root, work = Path(sys.argv[1]) / "data" / "persist", Path(sys.argv[2])
    base_in = {k: root / k for k in ("rollout_env", "train_vae3d", "encode_latents", "gen_worlds")}
    t0 = time.time()
    cfg0 = PersistConfig.for_profile("small", {})
    run_stage(train_camera_model_stage, cfg0, base_in, work / "cam", {"seed": SEED})
    for v in ("persist", "baseline"):
        run_stage(train_pixel_model_stage, cfg0, base_in, work / f"pix-{v}", {"seed": SEED, "variant": v})
    data = load_npz(root / "rollout_env" / "train.npz")
    colour_of = LandmarkColour(data["frames"], data["cls"])
    ep = load_npz(root / "rollout_env" / "val_probe.npz")
    starts = probe_windows(ep["probe_mask"])
    T = spin_steps(cfg0.world)
    for name in sys.argv[3:]:
        cfg = PersistConfig.for_profile("small", {"world_model": {"residual": name == "residual"}})
        run_stage(train_world_model_stage, cfg, base_in, work / f"w-{name}", {"seed": SEED})
        inputs = {**base_in, "train_world_model": {str(SEED): work / f"w-{name}"},
                  "train_camera_model": {str(SEED): work / "cam"},
                  "train_pixel_model": {f"{v}-{SEED}": work / f"pix-{v}" for v in ("persist", "baseline")}}
        models = Models(cfg, SimpleNamespace(inputs=inputs), SEED)
        vd = models.spec.view_distance
        if name == sys.argv[3]:
            lab0 = models.labels(models.normalise(encode_crops(models.vae, ep["crops"][:, 0])))
            ident = np.repeat(lab0[:, None], T + 1, 1)
            print("identity (true w0 held) state", round(state_probe_score(ident, ep["cams"], ep, starts, vd), 3),
                  "| gt frames", round(probe_score(colour_of, ep["frames"], ep, starts), 3), flush=True)
            g = rollout(models, ep, "baseline", T, SEED)
            print("baseline probe", round(probe_score(colour_of, g["frames"], ep, starts), 3), flush=True)
        for row in ("persist_w0", "persist"):
            g = rollout(models, ep, row, T, SEED)
            state = round(state_probe_score(g["labels"], g["cams"], ep, starts, vd), 3)
            # how much of the probe survives in the state at t = 0, 3, 12, 24 (true cameras, t = 0 view)
            keep = []
            for t in (0, 3, 12, T):
                lab = np.repeat(g["labels"][:, t:t + 1], T + 1, 1)
                keep.append(round(state_probe_score(lab, ep["cams"], ep, starts, vd), 3))
            print(f"W={name} {row}: probe {probe_score(colour_of, g['frames'], ep, starts):.3f} state {state}"
                  f" | state at t=0/3/12/24 seen with true cams {keep}  {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
