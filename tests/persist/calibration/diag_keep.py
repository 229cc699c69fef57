"""v6: why does W lose the probe when started from the true w_0? (dev project of dev_v6.py,
dev seed 100; validation probe spins only, the test worlds are never read.)

argv: dev_dir [W dir | -] [C dir | -] [variant "steps,gamma,tau_ctx" ...]
1. Tolerance of the VAE decoder: the true w_0 plus Gaussian noise of rms sigma (normalised
   latent units), held fixed over the spin: how much of the probe survives a perturbation.
2. W alone on the spin (true cameras, ground-truth frames as W's image input, its own past
   world frame as context): the state probe score at t = 3 / 12 / 24 (true cameras) and the
   rms drift |w_t - w_0| (in a spin the crop does not move, so the true w_t is w_0), per sampler
   variant: Euler steps, initial-noise scale gamma, inference context noise tau_ctx.
3. C on the spin: yaw and position error at t = 24 when rolled out from c_0 with its own
   predictions (the persist rows' cameras)."""
import sys, time
from pathlib import Path
from types import SimpleNamespace

import numpy as np, torch

from components.common.io import load_npz
from components.persist.config import PersistConfig
from components.persist.data import spin_steps
from components.persist.evaluate import Models, _step_camera, probe_windows, state_probe_score
from components.persist.models import noise_context, plucker, rf_timesteps, to_unit
from components.persist.train import encode_crops
from components.persist.world import NOOP, yaw_pitch_from_vector

torch.set_num_threads(1)
SEED = 100


def w_spin(models, ep, steps, gamma, tau_ctx, seed=SEED):
    """W alone over the spin from the encoded true w_0 (true cameras, GT frames)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    w = models.normalise(encode_crops(models.vae, ep["crops"][:, 0]))
    w0 = w.clone()
    b = len(w)
    T = ep["frames"].shape[1] - 1
    out, drift, first = [models.labels(w)], [], None
    valid = torch.ones(b, 1, *models.world.grid)
    for t in range(1, T + 1):
        cp, cn = ep["cams"][:, t - 1], ep["cams"][:, t]
        frame = to_unit(ep["frames"][:, t - 1])
        ctau = torch.full((b,), tau_ctx)
        w_ctx = noise_context(w, ctau)
        pl = torch.as_tensor(plucker(cp, frame.shape[-2:], models.cfg.world_model.patch))
        a = torch.as_tensor(ep["actions"][:, t].astype(np.int64))
        x = gamma * torch.randn(w.shape, generator=gen)
        taus = rf_timesteps(steps, models.cfg.evaluate.eta)
        with torch.no_grad():
            for t0, t1 in zip(taus[:-1], taus[1:]):
                v = models.world(x, torch.full((b,), t0), w_ctx, valid, a, torch.as_tensor(cp),
                                 torch.as_tensor(cn), frame, pl, ctau, torch.zeros(b))
                x = x + (t0 - t1) * v
        if first is None:
            first = float(x.pow(2).mean().sqrt())
        w = w + x
        drift.append(float((w - w0).pow(2).mean().sqrt()))
        out.append(models.labels(w))
    return np.stack(out, 1), drift, first


def keep_scores(labels, ep, starts, vd, ts=(3, 12, 24)):
    res = []
    for t in ts:
        lab = np.repeat(labels[:, t:t + 1], labels.shape[1], 1)
        res.append(round(state_probe_score(lab, ep["cams"], ep, starts, vd), 3))
    return res


def main():
    dev = Path(sys.argv[1])
    wdir = Path(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] != "-" else dev / "train_world_model"
    cdir = Path(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] != "-" else dev / "train_camera_model"
    variants = sys.argv[4:] or ["6,1,0.02", "20,1,0.02", "6,1,0", "6,0.5,0.02", "6,0,0.02", "1,0,0.02"]
    cfg = PersistConfig.for_profile("small", {"world": {"world_seed": 4100}})
    inputs = {"train_vae3d": dev / "train_vae3d", "encode_latents": dev / "encode_latents",
              "train_world_model": {str(SEED): wdir}, "train_camera_model": {str(SEED): cdir},
              "train_pixel_model": {f"{v}-{SEED}": dev / f"train_pixel_model-{v}" for v in ("persist", "baseline")}}
    models = Models(cfg, SimpleNamespace(inputs=inputs), SEED)
    vd = models.spec.view_distance
    ep = load_npz(dev / "rollout_env" / "val_probe.npz")
    starts = probe_windows(ep["probe_mask"])
    T = spin_steps(cfg.world)
    t0 = time.time()
    w0 = models.normalise(encode_crops(models.vae, ep["crops"][:, 0]))
    g = torch.Generator().manual_seed(0)
    tol = {}
    for sigma in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5):
        lab = models.labels(w0 + sigma * torch.randn(w0.shape, generator=g))
        tol[sigma] = round(state_probe_score(np.repeat(lab[:, None], T + 1, 1), ep["cams"], ep, starts, vd), 3)
    print("tolerance (sigma: state probe score, true w0 + noise held fixed)", tol, flush=True)
    for var in variants:
        if var == "none":
            continue
        if var == "rows":          # the rollout_eval rows themselves (C's cameras, P's frames)
            from components.persist.evaluate import LandmarkColour, probe_score, rollout
            train = load_npz(dev / "rollout_env" / "train.npz")
            colour_of = LandmarkColour(train["frames"], train["cls"])
            for row in ("persist_w0", "persist", "baseline"):
                g = rollout(models, ep, row, T, SEED)
                msg = f"row {row}: probe {probe_score(colour_of, g['frames'], ep, starts):.3f}"
                if "labels" in g:
                    msg += (f" state(own cams) {state_probe_score(g['labels'], g['cams'], ep, starts, vd):.3f}"
                            f" state t=24 true cams {keep_scores(g['labels'], ep, starts, vd, (T,))[0]:.3f}")
                print(msg, f" {time.time() - t0:.0f}s", flush=True)
            continue
        steps, gamma, tau_ctx = var.split(",")
        lab, drift, first = w_spin(models, ep, int(steps), float(gamma), float(tau_ctx))
        print(f"W alone steps={steps} gamma={gamma} tau_ctx={tau_ctx}: keep t=3/12/24 "
              f"{keep_scores(lab, ep, starts, vd)} drift rms t=1/3/12/24 "
              f"{[round(drift[i], 3) for i in (0, 2, 11, 23)]} first change rms {first:.3f}  {time.time() - t0:.0f}s",
              flush=True)
    # C over the spin (its own predictions from c_0)
    b = len(ep["cams"])
    k_c = models.camera.context
    cam_hist = np.repeat(ep["cams"][:, :1], k_c, 1)
    act_hist = np.full((b, k_c), NOOP, dtype=np.int64)
    w = w0
    for t in range(1, T + 1):
        act_hist = np.concatenate([act_hist[:, 1:], ep["actions"][:, t:t + 1].astype(np.int64)], 1)
        cam_new, shift = _step_camera(models, cam_hist, act_hist, w)
        cam_hist = np.concatenate([cam_hist[:, 1:], cam_new[:, None]], 1)
        cam_hist[:, :-1, :3] -= shift[:, None]
        if t in (1, 12, 24):
            yaw_p = np.array([yaw_pitch_from_vector(c)[0] for c in cam_new])
            yaw_t = np.array([yaw_pitch_from_vector(c)[0] for c in ep["cams"][:, t]])
            dy = np.rad2deg(np.abs((yaw_p - yaw_t + np.pi) % (2 * np.pi) - np.pi))
            dp = np.linalg.norm(cam_new[:, :3] - ep["cams"][:, t, :3], axis=-1)
            print(f"C spin t={t}: yaw err mean {dy.mean():.2f} deg (max {dy.max():.1f}), pos err {dp.mean():.3f} vox"
                  f", crop shifts {int((np.abs(shift) > 0).any(1).sum())}", flush=True)


if __name__ == "__main__":
    main()
