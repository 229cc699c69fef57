"""Dev check of premise P1 (validation worlds only): the small profile up to train_pixel_model with
dev seed 100 (P only: W, C and the baseline are not ancestors of train_pixel_model), then the oracle row on the validation
probe spins: GT crops -> VAE -> w_2D -> P, scored by the colour reader. Test worlds are never read."""
import sys, time
from pathlib import Path
from types import SimpleNamespace
import numpy as np, torch
from flows.runtime.runner import Selection
from flows.runtime.testing import run_in_temp_project
from components.common.io import load_npz
from components.persist.config import PersistConfig
from components.persist.data import env_spec, spin_steps
from components.persist.evaluate import (LandmarkColour, _sample_frame, _to_u8, probe_score, probe_windows,
                                         project_world)
from components.persist.models import to_unit
from components.persist.world import NOOP
from components.persist.train import build_pixel_model, decode_latents, encode_crops, load_vae
from components.common.io import load_torch



def main():
    root = Path(sys.argv[1]); extra = eval(sys.argv[2]) if len(sys.argv) > 2 else {}
    over = {"seeds": [100],
            "rollout": {"eval_probe_episodes": 2, "eval_free_episodes": 1, "eval_uniform_episodes": 1}}
    for k, v in extra.items():
        over.setdefault(k, {}).update(v)
    t0 = time.time()
    res = run_in_temp_project("persist", root, profile="small", selection=Selection(to="train_pixel_model"), overrides=over)
    print("pipeline", round(time.time() - t0), "s", flush=True)
    cfg = PersistConfig.for_profile("small", over)
    out = lambda s, k=None: res.out("persist", s, k)
    print("vae", res.metrics("persist", "train_vae3d"), res.metrics("persist", "encode_latents"))
    vae = load_vae(out("train_vae3d") / "vae3d.pt")
    lat = load_npz(out("encode_latents") / "latents.npz")
    mean, std = torch.as_tensor(lat["mean"]), torch.as_tensor(lat["std"])
    ck = load_torch(out("train_pixel_model", "100") / "pixel.pt")
    P = build_pixel_model(cfg.pixel_model, "persist", cfg.world.frame); P.load_state_dict(ck["state"]); P.eval()
    models = SimpleNamespace(cfg=cfg, spec=env_spec(cfg.world), vae=vae, pixel={"persist": P})
    train = load_npz(out("rollout_env") / "train.npz")
    colour_of = LandmarkColour(train["frames"], train["cls"])
    ep = load_npz(out("rollout_env") / "val_probe.npz")
    spin = spin_steps(cfg.world); k = cfg.pixel_model.persist_context
    gen = torch.Generator().manual_seed(100); torch.manual_seed(100)
    frames = [to_unit(ep["frames"][:, 0])]; b = len(frames[0]); acts_all = ep["actions"].astype(np.int64)
    for t in range(1, spin + 1):
        z = (torch.as_tensor(encode_crops(vae, ep["crops"][:, t])) - mean) / std
        labels = decode_latents(vae, z * std + mean)
        acts = np.stack([acts_all[:, t - j + 1] if t - j + 1 >= 1 else np.full(b, NOOP) for j in range(k, 0, -1)], 1)
        frames.append(_sample_frame(models, "persist", project_world(models, labels, ep["cams"][:, t]), frames, acts, gen))
    u8 = _to_u8(frames); starts = probe_windows(ep["probe_mask"])
    # diagnostic: the same with the ground-truth labels projected (no VAE): P alone
    gen = torch.Generator().manual_seed(100); torch.manual_seed(100)
    frames = [to_unit(ep["frames"][:, 0])]
    for t in range(1, spin + 1):
        acts = np.stack([acts_all[:, t - j + 1] if t - j + 1 >= 1 else np.full(b, NOOP) for j in range(k, 0, -1)], 1)
        frames.append(_sample_frame(models, "persist", project_world(models, ep["crops"][:, t], ep["cams"][:, t]), frames, acts, gen))
    print(f"P_on_gt_labels_val_probe_score={probe_score(colour_of, _to_u8(frames), ep, starts):.3f}", flush=True)
    vox = decode_latents(vae, torch.as_tensor(encode_crops(vae, ep["crops"][:, 0])))
    hit = [int(vox[i][tuple(c - ep["origins"][i, 0])] == ep["probe_colour"][i]) for i in range(b)
           for c in ep["probe_cells"][i] if c[0] >= 0]
    print(f"vae_val_probe_voxel_acc={np.mean(hit):.3f}", flush=True)
    print(f"oracle_val_probe_score={probe_score(colour_of, u8, ep, starts):.3f} "
          f"gt={probe_score(colour_of, ep['frames'], ep, starts):.3f} total {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":     # the runner's process pool re-imports this module
    main()
