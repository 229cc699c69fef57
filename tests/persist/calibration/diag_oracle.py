"""Why does the oracle row read the probe colour on only ~0.70 of its pixels? (validation worlds,
dev seed 100; the test worlds are never read). Re-uses a dev project's rollout_env, train_vae3d
and encode_latents outputs (argv[1], from dev_oracle.py), trains P in-process with the stage's
batch and loss (overrides argv[2] as a dict of pixel_model keys) and decomposes the oracle score:
the state ceiling (w_2D first layer = probe colour), per scored frame, edge vs interior pixels,
what the wrong pixels are read as, and sampler / history / cross-noise variants."""
import json, sys, time
from pathlib import Path
from types import SimpleNamespace

import numpy as np, torch
from scipy.ndimage import binary_erosion

from components.common.io import load_npz
from components.common.seeds import seed_everything
from components.common.train import fit
from components.persist.config import PersistConfig
from components.persist.data import env_spec, spin_steps
from components.persist.evaluate import (LandmarkColour, PixelClassifier, _sample_frame, _to_u8, probe_windows,
                                         project_world)
from components.persist.models import noise_context, to_unit
from components.persist.raycast import project
from components.persist.train import (_pairs, _split_episodes, build_pixel_model, decode_latents, encode_crops,
                                      load_vae, pixel_batch, pixel_loss)
from components.persist.world import LANDMARKS, NOOP

torch.set_num_threads(1)


def train_p(cfg, data, lat, seed=100):
    pm = cfg.pixel_model
    rng = seed_everything(seed)
    spec = env_spec(cfg.world)
    tr, _ = _split_episodes(data["frames"].shape[0], 0)
    model = build_pixel_model(pm, "persist", cfg.world.frame)
    t_max = data["frames"].shape[1]

    def batches():
        while True:
            yield pixel_batch(data, lat, _pairs(tr, t_max, rng, pm.batch_size), pm, "persist",
                              spec.view_distance, rng)
    rec = fit(model, batches(), pixel_loss, steps=pm.steps, lr=pm.lr, warmup=pm.steps // 20)
    return model.eval(), rec[-1]


def oracle(models, ep, labels_fn, seed=100, gt_history=False, w_noise=0.0):
    cfg = models.cfg
    k = cfg.pixel_model.persist_context
    gen = torch.Generator().manual_seed(seed); torch.manual_seed(seed)
    frames = [to_unit(ep["frames"][:, 0])]; b = len(frames[0]); acts_all = ep["actions"].astype(np.int64)
    for t in range(1, spin_steps(cfg.world) + 1):
        acts = np.stack([acts_all[:, t - j + 1] if t - j + 1 >= 1 else np.full(b, NOOP) for j in range(k, 0, -1)], 1)
        w2d = project_world(models, labels_fn(t), ep["cams"][:, t])
        if w_noise:
            w2d = noise_context(w2d, w_noise)
        hist = [to_unit(ep["frames"][:, j]) for j in range(t)] if gt_history else frames
        frames.append(_sample_frame(models, "persist", w2d, hist, acts, gen))
    return _to_u8(frames)


def breakdown(colour_of, classify, u8, ep, starts, state_cls):
    """Per-episode-mean probe score, and pooled pixel fractions by category."""
    out = {"score": [], "first": [], "later": [], "ret": [], "interior": [], "edge": []}
    read_as = {"probe": 0, "other_landmark": 0, "nonlandmark": 0}
    state_ok, n_pix, p_state_ok, p_state_bad = 0, 0, [], []
    for i, t0 in enumerate(starts):
        if t0 <= 0:
            continue
        m = ep["probe_mask"][i, t0:]
        if m.sum() == 0:
            continue
        rgb = u8[i, t0:].astype(np.float32) / 255
        ok = colour_of(rgb) == int(ep["probe_colour"][i])
        cls = classify(rgb)
        out["score"].append(ok[m].mean())
        if m[0].sum():
            out["first"].append(ok[0][m[0]].mean())
        if m[1:].sum():
            out["later"].append(ok[1:][m[1:]].mean())
        if m[-1].sum():
            out["ret"].append(ok[-1][m[-1]].mean())
        inner = np.stack([binary_erosion(f) for f in m])
        if inner.sum():
            out["interior"].append(ok[inner].mean())
        if (m & ~inner).sum():
            out["edge"].append(ok[m & ~inner].mean())
        lm = np.isin(cls, LANDMARKS)
        read_as["probe"] += int((ok & m).sum())
        read_as["other_landmark"] += int((~ok & lm & m).sum())
        read_as["nonlandmark"] += int((~ok & ~lm & m).sum())
        sc = state_cls[i, t0:] == int(ep["probe_colour"][i])
        state_ok += int((sc & m).sum()); n_pix += int(m.sum())
        if (sc & m).sum():
            p_state_ok.append(ok[sc & m].mean())
        if (~sc & m).sum():
            p_state_bad.append(ok[~sc & m].mean())
    tot = sum(read_as.values())
    res = {k: round(float(np.mean(v)), 3) for k, v in out.items() if v}
    res.update({f"px_{k}": round(v / tot, 3) for k, v in read_as.items()})
    res["state_ceiling_px"] = round(state_ok / max(n_pix, 1), 3)
    res["score_where_state_ok"] = round(float(np.mean(p_state_ok)), 3) if p_state_ok else None
    res["score_where_state_wrong"] = round(float(np.mean(p_state_bad)), 3) if p_state_bad else None
    return res


def detail(colour_of, classify, u8, ep, starts):
    """Score by the probe's on-screen size in the frame, and what wrong pixels are read as."""
    by_size, wrong = {}, np.zeros(11, int)
    for i, t0 in enumerate(starts):
        for t in range(max(t0, 1), u8.shape[1]):
            m = ep["probe_mask"][i, t]
            if t0 <= 0 or m.sum() == 0:
                continue
            rgb = u8[i, t][m].astype(np.float32) / 255
            ok = colour_of(rgb) == int(ep["probe_colour"][i])
            b = min(int(m.sum()) // 50, 4)
            by_size.setdefault(b, []).append(ok.mean())
            wrong += np.bincount(classify(rgb[~ok]), minlength=11)
    print("  by probe size (50px bins):", {k * 50: (round(float(np.mean(v)), 3), len(v)) for k, v in sorted(by_size.items())},
          " wrong read as class:", (wrong / max(wrong.sum(), 1)).round(2).tolist(), flush=True)


def regenerate(cfg, src: Path, dst: Path, vae: bool = False) -> Path:
    """rollout_env (and train_vae3d when ``vae``) and encode_latents re-run with ``cfg`` (fake
    stage context) into ``dst``, on the worlds (and otherwise the 3D VAE) of ``src``."""
    from components.persist.data import rollout_env_stage
    from components.persist.train import encode_latents_stage, train_vae3d_stage
    vae_dir = (dst if vae else src) / "train_vae3d"
    plan = [(rollout_env_stage, "rollout_env", {"gen_worlds": src / "gen_worlds"})]
    plan += [(train_vae3d_stage, "train_vae3d", {"rollout_env": dst / "rollout_env"})] if vae else []
    plan += [(encode_latents_stage, "encode_latents", {"rollout_env": dst / "rollout_env", "train_vae3d": vae_dir})]
    for stage, name, inputs in plan:
        out = dst / name
        out.mkdir(parents=True, exist_ok=True)
        ctx = SimpleNamespace(inputs=inputs, out_dir=out, progress=lambda *a, **k: None,
                              log_metrics=lambda *a, **k: None,
                              write_metrics=lambda m, out=out: print(out.name, m, flush=True))
        t = time.time()
        stage(cfg, ctx)
        print(f"  {name} {time.time() - t:.0f}s", flush=True)
    for name in ("gen_worlds", "train_vae3d"):
        if not (dst / name).exists():
            (dst / name).symlink_to(src / name)
    return dst


def main():
    root = Path(sys.argv[1]) / "data" / "persist"
    full = eval(sys.argv[2]) if len(sys.argv) > 2 else {}
    variants = sys.argv[3].split(",") if len(sys.argv) > 3 else ["base"]
    over = full.get("pixel_model", {})
    cfg = PersistConfig.for_profile("small", full)
    t0 = time.time()
    if full.get("rollout"):
        root = regenerate(cfg, root, Path(sys.argv[4]) / "data" / "persist", vae=len(sys.argv) > 5)
        print("regenerated", full["rollout"], f"{time.time() - t0:.0f}s", flush=True)
    data = load_npz(root / "rollout_env" / "train.npz")
    lat = load_npz(root / "encode_latents" / "latents.npz")
    vae = load_vae(root / "train_vae3d" / "vae3d.pt")
    P, last = train_p(cfg, data, lat)
    print("P trained", over, {k: round(v, 4) for k, v in last.items() if isinstance(v, float)},
          f"{time.time() - t0:.0f}s", flush=True)
    models = SimpleNamespace(cfg=cfg, spec=env_spec(cfg.world), vae=vae, pixel={"persist": P})
    colour_of = LandmarkColour(data["frames"], data["cls"])
    classify = PixelClassifier(data["frames"], data["cls"])
    ep = load_npz(root / "rollout_env" / "val_probe.npz")
    starts = probe_windows(ep["probe_mask"])
    T = spin_steps(cfg.world)
    vae_lab = {t: decode_latents(vae, torch.as_tensor(encode_crops(vae, ep["crops"][:, t]))) for t in range(T + 1)}
    st = np.stack([project(vae_lab[t], ep["cams"][:, t], (cfg.world.frame,) * 2, 2, models.spec.view_distance)["cls"][:, 0]
                   for t in range(T + 1)], 1)
    gt_state = np.stack([project(ep["crops"][:, t], ep["cams"][:, t], (cfg.world.frame,) * 2, 2,
                                 models.spec.view_distance)["cls"][:, 0] for t in range(T + 1)], 1)
    print("gt frames", breakdown(colour_of, classify, ep["frames"], ep, starts, st), flush=True)
    runs = {
        "base": dict(labels_fn=lambda t: vae_lab[t]),
        "gt_voxels": dict(labels_fn=lambda t: ep["crops"][:, t]),
        "gt_history": dict(labels_fn=lambda t: vae_lab[t], gt_history=True),
        "w_noise": dict(labels_fn=lambda t: vae_lab[t], w_noise=cfg.pixel_model.world_noise),
    }
    for name in variants:
        rf = int(name[2:]) if name.startswith("rf") else 6
        models.cfg = PersistConfig.for_profile("small", {**full, "evaluate": {"rf_steps": rf}})
        kw = runs["base"] if name.startswith("rf") else runs[name]
        u8 = oracle(models, ep, **kw)
        np.savez_compressed(f"/tmp/persist5/oracle_{name}_{abs(hash(str(full))) % 1000}.npz", u8=u8)
        detail(colour_of, classify, u8, ep, starts)
        print(name, breakdown(colour_of, classify, u8, ep, starts, gt_state if name == "gt_voxels" else st),
              f"{time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
