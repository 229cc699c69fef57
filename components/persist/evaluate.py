"""Stage rollout_eval: compose the separately trained modules at inference on held-out worlds
and score them with the ground truth the synthetic world provides.

Variants (all from the same eval episodes and action sequences):
- ``persist``: w_0 inferred by W from the single observed frame o_0 and c_0 (no GT 3D); the
  camera is predicted by C; frames by P from the projection of the decoded world frame.
- ``persist_w0``: the same, started from the encoded ground-truth w_0 (the paper's +w0).
- ``oracle``: ground-truth world frames and cameras every step; only P generates (upper bound).
- ``baseline``: the pixel-history model (Oasis-like), same backbone and budget as P.
- ``copy_first``: repeats o_0 (a static generator; lower bound that games RC-self).
"""
from __future__ import annotations

import numpy as np
import torch

from components.common.io import load_torch, write_table
from components.common.seeds import seed_everything
from components.persist.data import env_spec, load_npz, save_npz, spin_steps
from components.persist.models import (CameraModel, OnDevice, albedo_prior, noise_context, plucker, rf_sample, to_unit,
                                       w2d_features)
from components.persist.raycast import pixel_rays, project, render_views
from components.persist.train import (build_pixel_model, build_world_model, camera_inputs,
                                      cam_in_crop, decode_latents, encode_crops, inner_latent,
                                      load_vae, pixel_cond, pixel_context_len, shift_latent, stage_device)
from components.persist.world import (AIR, EYE_HEIGHT, LANDMARKS, N_CLASSES, NOOP, PALETTE, Agent,
                                      camera_basis, camera_from_vector, crop_shift, feet_local,
                                      place_pillar, yaw_pitch_from_vector)


# ----------------------------------------------------------------------------- pixel -> class
class _ColourTable:
    """5-NN on (RGB, class) pairs, tabulated on a 32^3 RGB grid so that classifying millions
    of generated pixels is a lookup."""

    BINS = 32

    def _fit(self, x: np.ndarray, y: np.ndarray) -> None:
        from sklearn.neighbors import KNeighborsClassifier

        knn = KNeighborsClassifier(min(5, len(x))).fit(x, y)
        g = (np.arange(self.BINS) + 0.5) / self.BINS
        grid = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
        self.table = knn.predict(grid).astype(np.uint8).reshape(self.BINS, self.BINS, self.BINS)

    def __call__(self, rgb01: np.ndarray) -> np.ndarray:
        q = np.clip((np.asarray(rgb01) * self.BINS).astype(np.int64), 0, self.BINS - 1)
        return self.table[q[..., 0], q[..., 1], q[..., 2]]


class PixelClassifier(_ColourTable):
    """Maps an RGB pixel to a voxel class, fitted on ground-truth training frames (the shaded
    palette with texture and fog)."""

    def __init__(self, frames: np.ndarray, cls: np.ndarray, n: int = 20000, seed: int = 0):
        rng = np.random.default_rng(seed)
        x = frames.reshape(-1, 3).astype(np.float32) / 255
        y = cls.reshape(-1)
        pick = rng.choice(len(x), min(n, len(x)), replace=False)
        self._fit(x[pick], y[pick])


class LandmarkColour(_ColourTable):
    """Reads a pixel as one of the landmark colours (a forced 3-way choice), fitted on the
    landmark pixels of ground-truth training frames; the unshaded palette stands in for a
    landmark colour absent from the frames."""

    def __init__(self, frames: np.ndarray, cls: np.ndarray, n: int = 20000, seed: int = 0):
        rng = np.random.default_rng(seed)
        keep = np.isin(cls.reshape(-1), LANDMARKS)
        x = frames.reshape(-1, 3)[keep].astype(np.float32) / 255
        y = cls.reshape(-1)[keep]
        pick = rng.choice(len(x), min(n, len(x)), replace=False)
        self._fit(np.concatenate([x[pick], PALETTE[list(LANDMARKS)]]),
                  np.concatenate([y[pick], np.array(LANDMARKS, dtype=y.dtype)]))


def psnr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-image PSNR (dB) of [0, 1] images (..., H, W, 3)."""
    mse = ((a - b) ** 2).mean(axis=(-1, -2, -3))
    return 10 * np.log10(1.0 / np.maximum(mse, 1e-10))


# ----------------------------------------------------------------------------- models
def _item_dir(inputs: dict, stage: str, *keys: str):
    """The folder of a fan-out dependency: ``inputs[stage]`` is that folder (an item dep) or a
    dict of folders keyed by item, of which the first of ``keys`` present is taken."""
    d = inputs[stage]
    if not isinstance(d, dict):
        return d
    for k in keys:
        if k in d:
            return d[k]
    raise KeyError(f"{stage}: none of {keys} in {sorted(d)}")


class Models:
    def __init__(self, cfg, ctx, seed: int):
        self.cfg = cfg
        self.spec = env_spec(cfg.world)
        dev = stage_device(cfg)
        self.vae = load_vae(ctx.inputs["train_vae3d"] / "vae3d.pt").to(dev)
        lat = load_npz(ctx.inputs["encode_latents"] / "latents.npz")
        self.mean, self.std = torch.as_tensor(lat["mean"]), torch.as_tensor(lat["std"])
        ck = load_torch(_item_dir(ctx.inputs, "train_world_model", str(seed)) / "world.pt")
        self.world = build_world_model(cfg.world_model, ck["latent_channels"], ck["grid"], ck["frame"])
        self.world.load_state_dict(ck["state"])
        self.world = OnDevice(self.world, dev)
        ck = load_torch(_item_dir(ctx.inputs, "train_camera_model", str(seed)) / "camera.pt")
        self.camera = CameraModel(ck["context"], ck["latent_dim"], ck["hidden"], ck.get("split_rotation", False))
        self.camera.load_state_dict(ck["state"])
        self.camera = OnDevice(self.camera, dev)
        self.cam_scale = ck["scale"]
        self.pixel = {}
        # v6: P (stage train_pixel_model) and the baseline (stage train_baseline) are separate
        # stages; an inputs dict in the v5 layout (train_pixel_model "{variant}-{seed}") also works
        dirs = {"persist": _item_dir(ctx.inputs, "train_pixel_model", str(seed), f"persist-{seed}"),
                "baseline": _item_dir(ctx.inputs, "train_baseline", str(seed)) if "train_baseline" in ctx.inputs
                else _item_dir(ctx.inputs, "train_pixel_model", f"baseline-{seed}")}
        for variant, path in dirs.items():
            ck = load_torch(path / "pixel.pt")
            m = build_pixel_model(cfg.pixel_model, variant, cfg.world.frame)
            m.load_state_dict(ck["state"])
            self.pixel[variant] = OnDevice(m, dev)

    def normalise(self, z):
        return (torch.as_tensor(z) - self.mean) / self.std

    def labels(self, zn: torch.Tensor) -> np.ndarray:
        return decode_latents(self.vae, zn * self.std + self.mean)


# ----------------------------------------------------------------------------- rollouts
def _step_camera(models: Models, cam_hist: np.ndarray, act_hist: np.ndarray, w: torch.Tensor):
    """Predict c_t from C; returns the new camera in the *new* crop and the crop shift."""
    spec = models.spec
    with torch.no_grad():
        delta = (models.camera(*camera_inputs(cam_hist, act_hist, w)) * models.cam_scale).numpy()
    prev = cam_hist[:, -1]
    new = prev.copy()
    new[:, :3] += delta[:, :3]
    for b in range(len(prev)):
        yaw, pitch = yaw_pitch_from_vector(prev[b])
        yaw, pitch = yaw + delta[b, 4], float(np.clip(pitch + delta[b, 3], -1.2, 1.2))
        f, _, u = camera_basis(yaw, pitch)
        new[b, 3:6], new[b, 6:9] = f, u
    new[:, 9] = prev[:, 9] + delta[:, 5]
    shift = crop_shift(feet_local(prev, spec), feet_local(new, spec), spec)
    new[:, :3] -= shift
    return new.astype(np.float32), shift


def _sample_world(models: Models, w_prev, valid, action, cam_prev, cam_now, frame, mode, gen):
    wm, ev = models.cfg.world_model, models.cfg.evaluate
    b = frame.shape[0]
    ctx_tau = torch.full((b,), wm.tau_ctx) * (1 - mode)
    w_ctx = noise_context(w_prev, ctx_tau) * valid.repeat_interleave(w_prev.shape[1] // valid.shape[1], 1)
    pl = torch.as_tensor(plucker(cam_prev, frame.shape[-2:], wm.patch))
    shape = (b, models.world.out.out_features, *models.world.grid)
    # residual W: the sample is the change on the newest past frame (clean; invalid cells 0)
    prior = w_prev[:, :shape[1]] * valid[:, :1] if wm.residual else 0.0
    with torch.no_grad():
        return prior + rf_sample(lambda x, tau: models.world(x, tau, w_ctx, valid, action, torch.as_tensor(cam_prev),
                                                             torch.as_tensor(cam_now), frame, pl, ctx_tau, mode),
                                 shape, ev.rf_steps, ev.eta, gen)


def _sample_frame(models: Models, variant: str, w2d, history: list[torch.Tensor], acts: np.ndarray, gen):
    pm, ev = models.cfg.pixel_model, models.cfg.evaluate
    k = pixel_context_len(pm, variant)
    hist = [history[0]] * max(0, k - len(history)) + history[-k:]
    ctx_frames = torch.stack(hist, 1)
    b = ctx_frames.shape[0]
    cond = pixel_cond(w2d, ctx_frames, torch.full((b, k), pm.tau_ctx))
    a = torch.as_tensor(acts[:, -k:], dtype=torch.int64)
    model = models.pixel[variant]
    with torch.no_grad():
        x = rf_sample(lambda x, tau: model(x, tau, cond, a), (b, 3, *ctx_frames.shape[-2:]),
                      ev.rf_steps, ev.eta, gen)
    return (x + albedo_prior(model, cond)).clamp(-1, 1)


def project_world(models: Models, labels: np.ndarray, cams: np.ndarray) -> torch.Tensor:
    pm = models.cfg.pixel_model
    pr = project(labels, cams, (models.cfg.world.frame,) * 2, pm.layers, models.spec.view_distance)
    return w2d_features(torch.as_tensor(pr["cls"]), torch.as_tensor(pr["depth"]), models.spec.view_distance,
                        pm.albedo)


def rollout(models: Models, ep: dict, variant: str, n_steps: int, seed: int,
            edit=None) -> dict[str, np.ndarray]:
    """Generate ``n_steps`` frames after the observed o_0 for a batch of episodes."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    b = len(ep["frames"])
    o0 = to_unit(ep["frames"][:, 0])
    frames = [o0]
    actions = ep["actions"].astype(np.int64)
    pm = models.cfg.pixel_model
    k_pix = pixel_context_len(pm, "persist" if variant != "baseline" else "baseline")
    out_labels, out_cams = [], []
    if variant == "copy_first":
        gen_frames = np.repeat(ep["frames"][:, :1], n_steps + 1, axis=1)
        return {"frames": gen_frames}
    if variant == "baseline":
        for t in range(1, n_steps + 1):
            acts = np.stack([actions[:, max(t - j + 1, 0)] if t - j + 1 >= 1 else np.full(b, NOOP)
                             for j in range(k_pix, 0, -1)], 1)
            frames.append(_sample_frame(models, "baseline", None, frames, acts, gen))
        return {"frames": _to_u8(frames)}
    k_c = models.camera.context
    cam = ep["cams"][:, 0].copy()
    cam_hist = np.repeat(cam[:, None], k_c, axis=1)
    act_hist = np.full((b, k_c), NOOP, dtype=np.int64)
    zero_w = torch.zeros(b, models.world.out.out_features, *models.world.grid)
    if variant == "persist":
        w = _sample_world(models, zero_w.repeat(1, models.world.context, 1, 1, 1),
                          torch.zeros(b, models.world.context, *models.world.grid),
                          torch.full((b,), NOOP), cam, cam, o0, torch.ones(b), gen)
    else:
        w = models.normalise(encode_crops(models.vae, ep["crops"][:, 0]))
    labels = models.labels(w)
    if edit is not None:                       # insert blocks into w_0 in 3D, re-encode
        labels = edit(labels)
        w = models.normalise(encode_crops(models.vae, labels))
        labels = models.labels(w)
    out_labels.append(labels)
    out_cams.append(cam)
    hist = world_history(w, models.world.context)
    for t in range(1, n_steps + 1):
        a = actions[:, t]
        if variant == "oracle":
            w = models.normalise(encode_crops(models.vae, ep["crops"][:, t]))
            cam = ep["cams"][:, t]
        else:
            act_hist = np.concatenate([act_hist[:, 1:], a[:, None]], 1)
            cam_new, shift = _step_camera(models, cam_hist, act_hist, w)
            cells = shift[:, :2] // models.spec.stride
            if not models.cfg.world_model.recentre_by_camera:
                cells = np.zeros_like(cells)        # W was trained to scroll the crop itself
            hist = [shift_history(z, v, cells) for z, v in hist]
            w_prev, valid = torch.cat([z for z, _ in hist], 1), torch.cat([v for _, v in hist], 1)
            cam_prev = cam_hist[:, -1].copy()
            cam_prev[:, :3] -= shift
            w = _sample_world(models, w_prev, valid, torch.as_tensor(a), cam_prev, cam_new,
                              frames[-1], torch.zeros(b), gen)
            cam_hist = np.concatenate([cam_hist[:, 1:], cam_new[:, None]], 1)
            cam_hist[:, :-1, :3] -= shift[:, None]
            cam = cam_new
        hist = world_history(w, len(hist), hist)
        labels = models.labels(w)
        out_labels.append(labels)
        out_cams.append(cam)
        acts = np.stack([actions[:, t - j + 1] if t - j + 1 >= 1 else np.full(b, NOOP)
                         for j in range(k_pix, 0, -1)], 1)
        frames.append(_sample_frame(models, "persist", project_world(models, labels, cam), frames, acts, gen))
    return {"frames": _to_u8(frames), "labels": np.stack(out_labels, 1), "cams": np.stack(out_cams, 1)}


def world_history(w: torch.Tensor, k: int, older: list | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The K past world frames W conditions on, newest first, each with its valid mask: ``w``
    in front of ``older`` (or of empty, invalid frames at the start of an episode, as in
    training)."""
    ones = torch.ones(w.shape[0], 1, *w.shape[2:])
    empty = (torch.zeros_like(w), torch.zeros_like(ones))
    rest = list(older or [])[:k - 1]
    return [(w, ones)] + rest + [empty] * (k - 1 - len(rest))


def shift_history(z: torch.Tensor, valid: torch.Tensor, cells: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """A past world frame and its valid mask moved with the crop; cells entering it are invalid."""
    return shift_latent(z, cells)[0], shift_latent(valid, cells)[0]


def _to_u8(frames: list[torch.Tensor]) -> np.ndarray:
    x = torch.stack(frames, 1).movedim(2, -1)
    return ((x.numpy() + 1) * 127.5).round().clip(0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------- metrics
def class_acc(pred: np.ndarray, gt: np.ndarray, mask: np.ndarray | None = None) -> float:
    ok = pred == gt
    return float(ok[mask].mean()) if mask is not None else float(ok.mean())


def warp_error(gen: np.ndarray, ep: dict, spec, steps: int) -> float:
    """L1 between generated frame t and generated frame t-1 warped to t with the GT relative
    pose and GT depth, over co-visible static pixels (mean over t = 1..steps)."""
    b, _, h, w, _ = gen.shape
    g = gen.astype(np.float32) / 255
    errs = []
    centre = np.array([spec.crop / 2, spec.crop / 2, spec.height / 2])
    for t in range(1, steps + 1):
        for i in range(b):
            e1, f1, r1, u1, fov = camera_from_vector(ep["cams"][i, t].astype(np.float64))
            e0, f0, r0, u0, _ = camera_from_vector(ep["cams"][i, t - 1].astype(np.float64))
            e1 = e1 + centre + ep["origins"][i, t]
            e0 = e0 + centre + ep["origins"][i, t - 1]
            d1 = ep["depth"][i, t].astype(np.float64)
            pts = e1 + d1[..., None] * pixel_rays(f1, r1, u1, fov, (h, w))
            v = pts - e0
            z = v @ f0
            tan = np.tan(fov / 2)
            x = (v @ r0) / np.maximum(z, 1e-6) / tan
            y = (v @ u0) / np.maximum(z, 1e-6) / tan
            col = np.floor((x + 1) / 2 * w).astype(int)
            row = np.floor((1 - y) / 2 * h).astype(int)
            ok = (d1 > 0) & (z > 0.1) & (col >= 0) & (col < w) & (row >= 0) & (row < h)
            rr, cc = np.clip(row, 0, h - 1), np.clip(col, 0, w - 1)
            d0 = ep["depth"][i, t - 1].astype(np.float64)[rr, cc]
            ok &= (np.abs(d0 - z) < 0.25) & (ep["cls"][i, t - 1][rr, cc] == ep["cls"][i, t])
            if ok.sum() > 0:
                errs.append(float(np.abs(g[i, t][ok] - g[i, t - 1][rr[ok], cc[ok]]).mean()))
    return float(np.mean(errs)) if errs else float("nan")


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(a, b):
        nz = a > 0
        return float((a[nz] * np.log(a[nz] / b[nz])).sum())
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def visible_voxel_acc(labels: np.ndarray, ep: dict, t: int) -> float:
    """Decoded w_t vs the GT crop on the voxels seen (first hits) in GT frames 0..t."""
    accs = []
    for i in range(len(labels)):
        cells = ep["cells"][i, :t + 1].reshape(-1, 3).astype(np.int64)
        cells = cells[(cells >= 0).all(1)] - ep["origins"][i, t].astype(np.int64)
        shape = np.array(labels.shape[-3:])
        cells = cells[((cells >= 0) & (cells < shape)).all(1)]
        if len(cells) == 0:
            continue
        cells = np.unique(cells, axis=0)
        pred = labels[i][cells[:, 0], cells[:, 1], cells[:, 2]]
        gt = ep["crops"][i, t][cells[:, 0], cells[:, 1], cells[:, 2]]
        accs.append(float((pred == gt).mean()))
    return float(np.mean(accs)) if accs else float("nan")


def camera_error(cams_pred: np.ndarray, ep: dict, spec, t: int) -> float:
    """Eye position error (voxels) of predicted vs GT camera at step t, in world coordinates.
    Predicted cameras are relative to the predicted crop, which equals the GT crop as long as
    the shifts agree; positions are compared after undoing both crops' offsets."""
    return float(np.linalg.norm(cams_pred[:, t, :3] - ep["cams"][:, t, :3], axis=-1).mean())


# ----------------------------------------------------------------------------- memory probe
def probe_windows(mask: np.ndarray) -> np.ndarray:
    """Per episode the first frame at which the probe is back in view after having left it
    (-1 when it never leaves or never returns). ``mask`` (B, T, H, W)."""
    visible = mask.reshape(*mask.shape[:2], -1).any(-1)
    out = np.full(len(mask), -1, dtype=np.int64)
    for i, vis in enumerate(visible):
        gone = np.nonzero(~vis[1:])[0]
        if len(gone) == 0:
            continue
        back = np.nonzero(vis[gone[0] + 1:])[0]
        if len(back):
            out[i] = gone[0] + 1 + back[0]
    return out


def probe_context(mask: np.ndarray, starts: np.ndarray, k: int) -> dict[str, float]:
    """Premise numbers on ground truth: probe pixels in the ``k`` frames a pixel-history model
    with a k-frame window holds when the first scored frame is generated, and the number of
    consecutive frames the probe was out of view before it."""
    ok = starts > 0
    ctx_px = [int(mask[i, max(t - k, 0):t].sum()) for i, t in enumerate(starts) if t > 0]
    vis = mask.reshape(*mask.shape[:2], -1).any(-1)
    gaps = []
    for i, t in enumerate(starts):
        if t > 0:
            g = 0
            while t - 1 - g >= 0 and not vis[i, t - 1 - g]:
                g += 1
            gaps.append(g)
    return {"probe_found_frac": float(ok.mean()),
            "probe_context_pixels_max": float(max(ctx_px)) if ctx_px else float("nan"),
            "probe_gap_min": float(min(gaps)) if gaps else float("nan")}


def probe_score(colour_of, frames_u8: np.ndarray, ep: dict, starts: np.ndarray,
                frames: slice | None = None) -> float:
    """Mean over episodes of the fraction of ground-truth probe pixels whose generated colour
    is read as the probe's colour (a 3-way choice among the landmark colours: chance 1/3).
    Scored frames: from the re-entry frame to the end, or ``frames``."""
    scores = []
    for i, t in enumerate(starts):
        if t <= 0:
            continue
        sel = slice(t, None) if frames is None else frames
        m = ep["probe_mask"][i, sel]
        if m.sum() == 0:
            continue
        pix = frames_u8[i, sel][m].astype(np.float32) / 255
        scores.append(float((colour_of(pix) == int(ep["probe_colour"][i])).mean()))
    return float(np.mean(scores)) if scores else float("nan")


def state_probe_score(labels: np.ndarray, cams: np.ndarray, ep: dict, starts: np.ndarray,
                      view_distance: float) -> float:
    """The probe score of the world *state* a row renders from: over the same scored frames and
    ground-truth probe pixels as ``probe_score``, the fraction whose first projected voxel in the
    decoded world frame (``labels`` (B, T, X, Y, Z), cameras ``cams`` (B, T, 10)) has the probe's
    colour. For the oracle row it is what the 3D VAE keeps of the probe: the ceiling of what P can
    show; for persist, what W kept."""
    hw = ep["probe_mask"].shape[-2:]
    scores = []
    for i, t in enumerate(starts):
        m = ep["probe_mask"][i, t:] if t > 0 else None
        if m is None or m.sum() == 0:
            continue
        first = project(labels[i, t:], cams[i, t:], hw, 1, view_distance)["cls"][:, 0]
        scores.append(float((first[m] == int(ep["probe_colour"][i])).mean()))
    return float(np.mean(scores)) if scores else float("nan")


# ----------------------------------------------------------------------------- editing
def edit_cells(ep: dict, worlds: np.ndarray, spec, i: int, distance: float) -> tuple[np.ndarray, int]:
    """A 1x1x3 landmark pillar on the ground ``distance`` voxels *behind* the agent at t = 0
    (out of view), in world voxels, with a landmark colour other than the probe's."""
    cam = ep["cams"][i, 0]
    yaw, _ = yaw_pitch_from_vector(cam)
    o = ep["origins"][i, 0].astype(np.int64)
    feet = feet_local(cam, spec) + o
    centre = feet[:2] - distance * np.array([np.cos(yaw), np.sin(yaw)])
    probe = int(ep["probe_colour"][i]) if "probe_colour" in ep else LANDMARKS[0]
    colour = LANDMARKS[(LANDMARKS.index(probe) + 1) % len(LANDMARKS)]
    vox = worlds[ep["world"][i]].copy()
    cells = place_pillar(vox, centre, 1, 3, colour)
    return (np.zeros((0, 3), np.int64) if cells is None else cells), colour


def edited_world(worlds: np.ndarray, ep: dict, i: int, cells: np.ndarray, colour: int) -> np.ndarray:
    vox = worlds[ep["world"][i]].copy()
    if "probe_cells" in ep:
        pc = ep["probe_cells"][i]
        pc = pc[(pc >= 0).all(1)].astype(np.int64)
        vox[pc[:, 0], pc[:, 1], pc[:, 2]] = ep["probe_colour"][i]
    vox[cells[:, 0], cells[:, 1], cells[:, 2]] = colour
    return vox


def gt_view(vox: np.ndarray, cam: np.ndarray, origin: np.ndarray, spec, hw) -> dict:
    eye = cam[:3] + np.array([spec.crop / 2, spec.crop / 2, spec.height / 2]) + origin
    yaw, pitch = yaw_pitch_from_vector(cam)
    return render_views(vox, [Agent(eye - np.array([0, 0, EYE_HEIGHT]), yaw, pitch)], spec, hw)


def edit_iou(models: Models, ep: dict, worlds: np.ndarray, classify, n: int, seed: int) -> dict:
    """Edit the world frame in 3D at t = 0 (a pillar behind the agent, out of view), spin half a
    turn and score the generated frame against a render of the edited world. The pillar is out
    of view at t = 0, so it can only appear through the edited world state, never through the
    pixel history (which P was trained to copy)."""
    spec = models.spec
    sub = {k: v[:n] for k, v in ep.items()}
    t_e = spin_steps(models.cfg.world) // 2
    hw = sub["frames"].shape[2:4]
    edits, gt_masks, seen_t0 = [], [], []
    for i in range(n):
        cells, colour = edit_cells(sub, worlds, spec, i, 3.0)
        vox = edited_world(worlds, sub, i, cells, colour)
        o0, oe = sub["origins"][i, 0].astype(np.int64), sub["origins"][i, t_e].astype(np.int64)
        view = gt_view(vox, sub["cams"][i, t_e], oe, spec, hw)
        gt_masks.append(_cells_mask(view["cell"][0], cells))
        seen_t0.append(_cells_mask(gt_view(vox, sub["cams"][i, 0], o0, spec, hw)["cell"][0], cells).sum())
        edits.append((cells - o0, colour))

    def apply(labels):
        out = labels.copy()
        for i, (cells, colour) in enumerate(edits):
            inside = ((cells >= 0) & (cells < np.array(out.shape[1:]))).all(1)
            c = cells[inside]
            out[i, c[:, 0], c[:, 1], c[:, 2]] = colour
        return out

    out = {"visible_t0_pixels": float(np.sum(seen_t0))}
    for variant in ("persist", "persist_w0"):
        gen = rollout(models, sub, variant, t_e, seed, edit=apply)
        pred = classify(gen["frames"][:, t_e] / 255)
        ious = [iou(pred[i] == colour, gt) for i, ((_, colour), gt) in enumerate(zip(edits, gt_masks))
                if gt.sum() > 0]
        out[variant] = float(np.mean(ious)) if ious else float("nan")
    return out


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max((a | b).sum(), 1))


def _cells_mask(cell_map: np.ndarray, cells: np.ndarray) -> np.ndarray:
    hits = np.zeros(cell_map.shape[:-1], dtype=bool)
    for c in cells:
        hits |= (cell_map == c).all(-1)
    return hits


# ----------------------------------------------------------------------------- stage
SETS = ("probe", "uniform", "free")


def _spin_metrics(record, variant, set_name, gen, ep, pred, spin, colour_of, starts, view_distance):
    g01, gt_rgb = gen["frames"] / 255, ep["frames"] / 255
    record(variant, set_name, f"acc_gt_t{spin}", class_acc(pred[:, spin], ep["cls"][:, spin]))
    record(variant, set_name, f"acc_nonsky_t{spin}",
           class_acc(pred[:, spin], ep["cls"][:, spin], ep["cls"][:, spin] != AIR))
    record(variant, set_name, f"psnr_gt_t{spin}", psnr(g01[:, spin], gt_rgb[:, spin]).mean())
    if "probe_mask" in ep:
        record(variant, set_name, "probe_score", probe_score(colour_of, gen["frames"], ep, starts))
        if "labels" in gen:
            record(variant, set_name, "state_probe_score",
                   state_probe_score(gen["labels"], gen["cams"], ep, starts, view_distance))
        record(variant, set_name, "probe_score_return",
               probe_score(colour_of, gen["frames"], ep, starts, slice(spin, spin + 1)))


def _free_metrics(record, variant, set_name, gen, ep, pred, ev, spec):
    n_steps = ep["frames"].shape[1] - 1
    for h in ev.horizons:
        if h <= n_steps:
            record(variant, set_name, f"acc_h{h}", class_acc(pred[:, h], ep["cls"][:, h]))
            if "labels" in gen:
                record(variant, set_name, f"voxel_acc_h{h}", visible_voxel_acc(gen["labels"][:, h], ep, h))
                record(variant, set_name, f"cam_pos_err_h{h}", camera_error(gen["cams"], ep, spec, h))
    accs = [class_acc(pred[:, h], ep["cls"][:, h]) for h in ev.horizons if h <= n_steps]
    if len(accs) >= 2:
        record(variant, set_name, "acc_ratio_last_first", accs[-1] / max(accs[0], 1e-9))
    record(variant, set_name, "warp_l1", warp_error(gen["frames"], ep, spec, min(32, n_steps)))
    hist_gen = np.bincount(pred[:, 1:].ravel(), minlength=N_CLASSES).astype(float)
    hist_gt = np.bincount(ep["cls"][:, 1:].ravel(), minlength=N_CLASSES).astype(float)
    record(variant, set_name, "class_hist_js", js_divergence(hist_gen + 1e-9, hist_gt + 1e-9))


def _set_variants(set_name: str, variants: list[str], cut_rows: list[str] = ()) -> list[str]:
    """The rows run on a set; ``cut_rows`` ("set:variant", evaluate.cut_rows) are left out."""
    if set_name == "uniform":
        variants = [v for v in variants if v in ("persist", "baseline", "copy_first")]
    if set_name == "val_probe":        # premise only: the oracle row and a static control
        variants = [v for v in variants if v in ("oracle", "copy_first")]
    return [v for v in variants if f"{set_name}:{v}" not in cut_rows]


PARTS = {"probe": ("probe",), "rest": ("val_probe", "uniform", "free")}
"""v6: ``rollout_eval`` fans out over (part, seed): the test probe set's rows, and the rest (the
validation probe set, the control, free play, the edit test). Each row draws its own sampling
stream from the seed (``rollout`` reseeds), so the split changes no number; it balances the
two cores (3 seeds on 2 workers left one idle for a whole item)."""


def rollout_eval_stage(cfg, ctx) -> None:
    seed = ctx.item["seed"]
    part = ctx.item.get("part", "all")          # "all": every row in one call (scripts, old layout)
    own = ("val_probe",) + SETS if part == "all" else PARTS[part]
    seed_everything(seed)
    ev = cfg.evaluate
    models = Models(cfg, ctx, seed)
    spec = models.spec
    train = load_npz(ctx.inputs["rollout_env"] / "train.npz")
    classify = PixelClassifier(train["frames"], train["cls"])
    colour_of = LandmarkColour(train["frames"], train["cls"])
    del train
    sets = {name: load_npz(ctx.inputs["rollout_env"] / f"eval_{name}.npz") for name in SETS}
    sets["val_probe"] = load_npz(ctx.inputs["rollout_env"] / "val_probe.npz")
    worlds = load_npz(ctx.inputs["gen_worlds"] / "worlds.npz")
    rows, summary = [], {}
    spin = spin_steps(cfg.world)
    k_base = cfg.pixel_model.baseline_context

    def record(variant, set_name, metric, value):
        rows.append({"variant": variant, "set": set_name, "metric": metric, "value": float(value)})
        summary[f"{variant}_{set_name}_{metric}"] = float(value)

    starts = {name: probe_windows(sets[name]["probe_mask"]) for name in ("probe", "val_probe")}
    for name in ("probe", "val_probe"):
        if name not in own:
            continue
        ep = sets[name]
        for key, value in probe_context(ep["probe_mask"], starts[name], k_base).items():
            record("ground_truth", name, key, value)
        record("ground_truth", name, "probe_score", probe_score(colour_of, ep["frames"], ep, starts[name]))
    if "probe" in own:
        summary["classifier_ceiling_acc"] = class_acc(classify(sets["probe"]["frames"][:, :1] / 255),
                                                      sets["probe"]["cls"][:, :1])
    generated = {}
    plan = [(v, s) for s in ("val_probe",) + SETS if s in own for v in _set_variants(s, ev.variants, ev.cut_rows)]
    for done, (variant, set_name) in enumerate(plan, 1):
        ep = sets[set_name]
        gen = rollout(models, ep, variant, ep["frames"].shape[1] - 1, seed)
        generated[f"{variant}_{set_name}"] = gen["frames"]
        pred = classify(gen["frames"] / 255)
        if set_name == "free":
            _free_metrics(record, variant, set_name, gen, ep, pred, ev, spec)
        else:
            _spin_metrics(record, variant, set_name, gen, ep, pred, spin, colour_of, starts.get(set_name),
                          spec.view_distance)
        ctx.progress(done, len(plan), f"{variant} {set_name}")
    if "free" in own:
        ep = sets["free"]
        record("ground_truth", "free", "warp_l1",
               warp_error(ep["frames"], ep, spec, min(32, ep["frames"].shape[1] - 1)))
        ious = edit_iou(models, sets["probe"], worlds["eval"], classify,
                        min(ev.edit_episodes, len(sets["probe"]["frames"])), seed)
        record("ground_truth", "edit", "visible_t0_pixels", ious.pop("visible_t0_pixels"))
        for variant, iou in ious.items():
            record(variant, "edit", "iou", iou)
    write_table(ctx.out_dir / "metrics.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    save_npz(ctx.out_dir / "generated.npz", **generated)
    if "probe" in own:
        _plot_spin(generated, sets["probe"], ctx.out_dir / "spin.png", spin)
        ctx.log_artifact(ctx.out_dir / "spin.png")
    ctx.write_metrics(summary)


def _plot_spin(generated, ep, path, spin) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_t = ep["frames"].shape[1]
    ts = sorted({t for t in (0, spin // 4, spin // 2, 3 * spin // 4, spin - 3, spin) if 0 <= t < n_t})
    rows = ["ground_truth"] + [k for k in generated if k.endswith("_probe")]
    fig, axes = plt.subplots(len(rows), len(ts), figsize=(1.6 * len(ts), 1.6 * len(rows)), squeeze=False)
    for r, name in enumerate(rows):
        frames = ep["frames"] if name == "ground_truth" else generated[name]
        for c, t in enumerate(ts):
            axes[r, c].imshow(frames[0, t])
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
            if r == 0:
                axes[r, c].set_title(f"t={t}", fontsize=8)
        axes[r, 0].set_ylabel(name.replace("_probe", ""), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


_ = (PALETTE, cam_in_crop, inner_latent)
