"""Training stages. Each module is trained separately with teacher forcing on ground-truth
world frames and cameras (as in the paper) and composed only at inference (evaluate.py)."""
from __future__ import annotations

import numpy as np
import torch

from components.common.devices import resolve_device
from components.common.io import load_torch, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit
from components.persist.data import env_spec, load_npz, save_npz
from components.persist.models import (VAE3D, CameraModel, DiTPixelModel, PixelUNet, WorldModel, albedo_prior, autocast,
                                       class_weights, count_params, device_of, noise_context, plucker,
                                       rf_interpolate, rf_loss, to_device, to_unit, w2d_features)
from components.persist.raycast import project
from components.persist.world import EYE_HEIGHT, LANDMARKS, N_ACTIONS, N_CLASSES, NOOP, place_pillar


def _set_threads():
    torch.set_num_threads(max(1, torch.get_num_threads()))


def stage_device(cfg) -> torch.device:
    """``device.device``: cpu (smoke, small) or auto (paper: CUDA when visible)."""
    return resolve_device(cfg.device.device)


def cpu_state(model: torch.nn.Module) -> dict:
    """The state dict on the CPU (checkpoints load anywhere; a no-op for CPU models)."""
    return {k: v.cpu() for k, v in model.state_dict().items()}


# ----------------------------------------------------------------------------- 3D VAE
def train_vae3d_stage(cfg, ctx) -> None:
    v = cfg.vae3d
    seed_everything(v.seed)
    crops = load_npz(ctx.inputs["rollout_env"] / "train.npz")["crops"]
    flat = torch.as_tensor(crops.reshape(-1, *crops.shape[2:]))
    n = len(flat)
    perm = torch.randperm(n)
    n_val = max(1, n // 20)
    val, tr = flat[perm[:n_val]], flat[perm[n_val:]]
    dev = stage_device(cfg)
    model = VAE3D(v.latent_channels, v.width, arch=v.arch).to(dev)
    gen = torch.Generator().manual_seed(v.seed)
    rng = np.random.default_rng(v.seed)             # augmentation draws

    def batches():
        while True:
            b = tr[torch.randint(len(tr), (v.batch_size,), generator=gen)]
            yield augment_crops(b, rng, v.insert_pillars) if v.augment else b

    def evaluate(m):
        return {"val/voxel_acc": voxel_accuracy(m, val), "val/solid_acc": voxel_accuracy(m, val, solid=True),
                "val/landmark_acc": voxel_accuracy(m, val, classes=LANDMARKS)}

    weight = to_device(class_weights(crops, v.class_weight_power), dev)

    def loss_fn(m, b):
        with autocast(dev):
            return m.loss(b.to(dev), class_weight=weight)

    records = fit(model, batches(), loss_fn, steps=v.steps, lr=v.lr,
                  warmup=v.steps // 20, ctx=ctx, eval_fn=evaluate,
                  eval_every=max(1, v.steps // 4), prefix="vae3d")
    save_torch(ctx.out_dir / "vae3d.pt", {"state": cpu_state(model),
                                          "args": dict(latent_channels=v.latent_channels, width=v.width,
                                                       arch=v.arch)})
    last = records[-1]
    ctx.write_metrics({"final_loss": last["vae3d/loss"], "val_voxel_acc": last["val/voxel_acc"],
                       "val_solid_voxel_acc": last["val/solid_acc"],
                       "val_landmark_voxel_acc": last["val/landmark_acc"], "n_params": count_params(model)})


def augment_crops(crops: torch.Tensor, rng: np.random.Generator, insert_pillars: int = 0) -> torch.Tensor:
    """Label-preserving variations of agent-centred crops (B, X, Y, Z): a random permutation of
    the landmark colours (the colour can then only come from the voxels, never from the
    surroundings it was seen in), a random xy flip / transpose (crops are world-aligned, so any
    of the 8 symmetries of the square is a crop of some world), and ``insert_pillars`` 1x1x3
    landmark pillars of random colour stood on the surface at random columns."""
    out = crops.numpy().copy()
    lm = np.array(LANDMARKS)
    for i, c in enumerate(out):
        lut = np.arange(N_CLASSES, dtype=np.uint8)
        lut[lm] = rng.permutation(lm)
        c = lut[c]
        if rng.random() < 0.5:
            c = c[::-1]
        if rng.random() < 0.5:
            c = c[:, ::-1]
        if rng.random() < 0.5 and c.shape[0] == c.shape[1]:
            c = c.transpose(1, 0, 2)
        for _ in range(insert_pillars):
            x, y = rng.integers(0, c.shape[0]), rng.integers(0, c.shape[1])
            place_pillar(c, np.array([x + 0.5, y + 0.5]), 1, 3, int(rng.choice(lm)))
        out[i] = c
    return torch.as_tensor(out)


@torch.no_grad()
def voxel_accuracy(model: VAE3D, labels: torch.Tensor, solid: bool = False, classes=None) -> float:
    dev = device_of(model)
    pred = torch.cat([model.decode(model.encode(b.to(dev))).argmax(1).cpu() for b in labels.split(64)])
    mask = labels != 0 if solid else torch.ones_like(labels, dtype=torch.bool)
    if classes is not None:
        mask = torch.isin(labels, torch.as_tensor(classes, dtype=labels.dtype))
    return float((pred == labels.long())[mask].float().mean())


def load_vae(path) -> VAE3D:
    ck = load_torch(path)
    model = VAE3D(**ck["args"])
    model.load_state_dict(ck["state"])
    return model.eval()


@torch.no_grad()
def encode_crops(vae: VAE3D, crops: np.ndarray) -> np.ndarray:
    flat = torch.as_tensor(crops.reshape(-1, *crops.shape[-3:]))
    dev = device_of(vae)
    z = torch.cat([vae.encode(b.to(dev)).float().cpu() for b in flat.split(128)])
    return z.numpy().reshape(*crops.shape[:-3], *z.shape[1:])


@torch.no_grad()
def decode_latents(vae: VAE3D, z: np.ndarray | torch.Tensor) -> np.ndarray:
    z = torch.as_tensor(z, dtype=torch.float32)
    flat = z.reshape(-1, *z.shape[-4:])
    dev = device_of(vae)
    lab = torch.cat([vae.decode(b.to(dev)).argmax(1).cpu() for b in flat.split(128)]).to(torch.uint8)
    return lab.numpy().reshape(*z.shape[:-4], *lab.shape[1:])


# ----------------------------------------------------------------------------- latents
def encode_latents_stage(cfg, ctx) -> None:
    """Pre-encode every training crop (latents are cached, as in the paper) and project the
    decoded ground-truth world frames with the ground-truth cameras: the teacher-forced w_2D
    inputs of P_theta."""
    _set_threads()
    spec = env_spec(cfg.world)
    data = load_npz(ctx.inputs["rollout_env"] / "train.npz")
    vae = load_vae(ctx.inputs["train_vae3d"] / "vae3d.pt").to(stage_device(cfg))
    z = encode_crops(vae, data["crops"])
    mean = z.mean(axis=(0, 1, 3, 4, 5), keepdims=True)[0, 0]
    std = z.std(axis=(0, 1, 3, 4, 5), keepdims=True)[0, 0] + 1e-6
    e, t = data["crops"].shape[:2]
    hits_cls, hits_depth = [], []
    recon = decode_latents(vae, z)
    for i in range(e):
        pr = project(recon[i], data["cams"][i], (cfg.world.frame,) * 2, cfg.pixel_model.layers,
                     spec.view_distance)
        hits_cls.append(pr["cls"])
        hits_depth.append(pr["depth"].astype(np.float16))
        ctx.progress(i + 1, e, "projecting decoded world frames")
    hits_cls = np.stack(hits_cls)
    save_npz(ctx.out_dir / "latents.npz", z=z.astype(np.float32), mean=mean, std=std,
             w2d_cls=hits_cls, w2d_depth=np.stack(hits_depth))
    acc = float((recon == data["crops"]).mean())
    proj_acc = float((hits_cls[:, :, 0] == data["cls"]).mean())
    ctx.write_metrics({"recon_voxel_acc": acc, "w2d_first_layer_class_acc": proj_acc,
                       "latent_shape": list(z.shape[2:])})


# ----------------------------------------------------------------------------- world model
def shift_latent(z: torch.Tensor, shift_cells: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-express latents in a crop whose origin moved by ``shift_cells`` (B, 2) latent cells:
    new[i] = old[i + s]; cells that enter the crop are zero and marked invalid."""
    out = torch.zeros_like(z)
    valid = torch.zeros(z.shape[0], 1, *z.shape[2:])
    gx, gy = z.shape[2], z.shape[3]
    for b, (sx, sy) in enumerate(np.asarray(shift_cells, dtype=int)):
        if abs(sx) >= gx or abs(sy) >= gy:
            continue
        src_x = slice(max(sx, 0), gx + min(sx, 0))
        dst_x = slice(max(-sx, 0), gx + min(-sx, 0))
        src_y = slice(max(sy, 0), gy + min(sy, 0))
        dst_y = slice(max(-sy, 0), gy + min(-sy, 0))
        out[b, :, dst_x, dst_y] = z[b, :, src_x, src_y]
        valid[b, :, dst_x, dst_y] = 1
    return out, valid


def cam_in_crop(cam: np.ndarray, origin_from: np.ndarray, origin_to: np.ndarray) -> np.ndarray:
    """A camera vector relative to another crop (only the position changes)."""
    out = np.array(cam, dtype=np.float32, copy=True)
    out[..., :3] += (origin_from - origin_to)[..., :3]
    return out


def world_batch(data: dict, zn: np.ndarray, idx: np.ndarray, wm, spec, rng: np.random.Generator,
                train: bool = True) -> dict:
    """Teacher-forced W inputs for (episode, t) pairs ``idx`` (t >= 1)."""
    e, t = idx[:, 0], idx[:, 1]
    b = len(idx)
    target = torch.as_tensor(zn[e, t])
    prev, valid, clean = [], [], None
    for k in range(1, wm.context + 1):
        tk = np.maximum(t - k, 0)
        shift = (data["origins"][e, t] - data["origins"][e, tk])[:, :2] // spec.stride
        if not wm.recentre_by_camera:
            shift = np.zeros_like(shift)
        p, v = shift_latent(torch.as_tensor(zn[e, tk]), shift)
        v = v * torch.as_tensor((t - k >= 0).astype(np.float32)).view(-1, 1, 1, 1, 1)
        prev.append(p * v)
        valid.append(v)
        clean = p * v if clean is None else clean     # newest past frame before context noise
    prev, valid = torch.cat(prev, 1), torch.cat(valid, 1)
    ctx_tau = torch.as_tensor(rng.uniform(0, wm.ctx_noise_max, b), dtype=torch.float32) if train \
        else torch.full((b,), wm.tau_ctx)
    prev = noise_context(prev, ctx_tau) * valid.repeat_interleave(zn.shape[2], 1)
    drop = rng.random(b) < wm.p_drop_history if train else np.zeros(b, dtype=bool)
    mode = torch.as_tensor(drop.astype(np.float32))
    o_t, o_prev = data["origins"][e, t], data["origins"][e, t - 1]
    cam_now = data["cams"][e, t]
    cam_prev = cam_in_crop(data["cams"][e, t - 1], o_prev, o_t)
    frame_idx = np.where(drop, t, t - 1)
    cam_img = np.where(drop[:, None], cam_now, cam_prev)
    frame = to_unit(data["frames"][e, frame_idx])
    frame = noise_context(frame, wm.frame_noise)          # cross-component noise on O
    action = torch.as_tensor(np.where(drop, NOOP, data["actions"][e, t]).astype(np.int64))
    keep = torch.as_tensor((~drop).astype(np.float32)).view(-1, 1, 1, 1, 1)
    return {"target": target, "prior": clean * keep if wm.residual else torch.zeros_like(target),
            "w_prev": prev * keep, "valid": valid * keep, "action": action,
            "cam_prev": torch.as_tensor(np.where(drop[:, None], cam_now, cam_prev)),
            "cam_now": torch.as_tensor(cam_now), "frame": frame,
            "frame_pl": torch.as_tensor(plucker(cam_img, frame.shape[-2:], wm.patch)),
            "ctx_tau": ctx_tau * keep.view(-1), "mode": mode}


def world_loss(model: WorldModel, batch: dict) -> torch.Tensor:
    dev = device_of(model)
    batch = to_device(batch, dev)
    tau = torch.rand(batch["target"].shape[0], device=dev)
    x0 = batch["target"] - batch["prior"]       # residual W: the flow generates the change only
    x_tau, x1 = rf_interpolate(x0, tau)
    with autocast(dev):
        v = model(x_tau, tau, batch["w_prev"], batch["valid"], batch["action"], batch["cam_prev"],
                  batch["cam_now"], batch["frame"], batch["frame_pl"], batch["ctx_tau"], batch["mode"])
    return rf_loss(v.float(), x0, x1)


def build_world_model(cfg_wm, latent_channels: int, grid, frame: int) -> WorldModel:
    model = WorldModel(latent_channels, tuple(grid), frame, cfg_wm.d_model, cfg_wm.n_layers,
                       cfg_wm.n_heads, cfg_wm.patch, cfg_wm.context)
    return model


def _load_train(ctx):
    data = load_npz(ctx.inputs["rollout_env"] / "train.npz")
    lat = load_npz(ctx.inputs["encode_latents"] / "latents.npz")
    zn = ((lat["z"] - lat["mean"]) / lat["std"]).astype(np.float32)
    return data, lat, zn


def _split_episodes(n_ep: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_ep)
    n_val = max(1, n_ep // 10)
    return perm[n_val:], perm[:n_val]


def _pairs(episodes: np.ndarray, t_max: int, rng: np.random.Generator, n: int) -> np.ndarray:
    return np.stack([rng.choice(episodes, n), rng.integers(1, t_max, n)], 1)


def train_world_model_stage(cfg, ctx) -> None:
    _set_threads()
    wm, seed = cfg.world_model, ctx.item["seed"]
    rng = seed_everything(seed)
    spec = env_spec(cfg.world)
    data, lat, zn = _load_train(ctx)
    tr, va = _split_episodes(len(zn), 0)
    t_max = zn.shape[1]
    model = build_world_model(wm, zn.shape[2], zn.shape[3:], cfg.world.frame).to(stage_device(cfg))
    val_rng = np.random.default_rng(123)
    val_batch = world_batch(data, zn, _pairs(va, t_max, val_rng, 128), wm, spec, val_rng)

    def batches():
        while True:
            yield world_batch(data, zn, _pairs(tr, t_max, rng, wm.batch_size), wm, spec, rng)

    def evaluate(m):
        torch.manual_seed(0)
        return {"val/rf_loss": float(world_loss(m, val_batch))}

    records = fit(model, batches(), world_loss, steps=wm.steps, lr=wm.lr, warmup=wm.steps // 20,
                  ctx=ctx, eval_fn=evaluate, eval_every=max(1, wm.steps // 4), prefix="world")
    save_torch(ctx.out_dir / "world.pt", {"state": cpu_state(model), "latent_channels": zn.shape[2],
                                          "grid": list(zn.shape[3:]), "frame": cfg.world.frame})
    ctx.write_metrics({"final_loss": records[-1]["world/loss"], "val_rf_loss": records[-1]["val/rf_loss"],
                       "n_params": count_params(model)})


# ----------------------------------------------------------------------------- camera model
def inner_latent(z: np.ndarray | torch.Tensor) -> torch.Tensor:
    """The inner 2 x 2 horizontal columns of the latent grid, flattened (the paper crops W to
    its inner 4^3 for C_theta)."""
    z = torch.as_tensor(z)
    gx, gy = z.shape[-3], z.shape[-2]
    return z[..., gx // 2 - 1:gx // 2 + 1, gy // 2 - 1:gy // 2 + 1, :].flatten(-4)


def camera_targets(cam_prev: np.ndarray, cam_now: np.ndarray) -> np.ndarray:
    """(d_pos[3], d_pitch, d_yaw, d_fov); both cameras in the same crop coordinates."""
    f0, f1 = cam_prev[..., 3:6], cam_now[..., 3:6]
    yaw0, yaw1 = np.arctan2(f0[..., 1], f0[..., 0]), np.arctan2(f1[..., 1], f1[..., 0])
    pit0, pit1 = np.arcsin(np.clip(f0[..., 2], -1, 1)), np.arcsin(np.clip(f1[..., 2], -1, 1))
    dyaw = (yaw1 - yaw0 + np.pi) % (2 * np.pi) - np.pi
    return np.concatenate([cam_now[..., :3] - cam_prev[..., :3], (pit1 - pit0)[..., None],
                           dyaw[..., None], (cam_now[..., 9] - cam_prev[..., 9])[..., None]], -1)


def camera_inputs(cams_hist: np.ndarray, actions_hist: np.ndarray, z_prev) -> tuple:
    return (torch.as_tensor(cams_hist, dtype=torch.float32),
            torch.as_tensor(actions_hist, dtype=torch.int64), inner_latent(z_prev).float())


def camera_batch(data, zn, idx, k_ctx: int):
    e, t = idx[:, 0], idx[:, 1]
    o_prev = data["origins"][e, t - 1]
    hist = []
    for k in range(k_ctx, 0, -1):
        tk = np.maximum(t - k, 0)
        hist.append(cam_in_crop(data["cams"][e, tk], data["origins"][e, tk], o_prev))
    acts = np.stack([np.where(t - k + 1 >= 1, data["actions"][e, np.maximum(t - k + 1, 0)], NOOP)
                     for k in range(k_ctx, 0, -1)], 1)
    cam_now = cam_in_crop(data["cams"][e, t], data["origins"][e, t], o_prev)
    target = camera_targets(hist[-1], cam_now)
    return camera_inputs(np.stack(hist, 1), acts, zn[e, t - 1]) + (torch.as_tensor(target, dtype=torch.float32),)


def train_camera_model_stage(cfg, ctx) -> None:
    _set_threads()
    cm, seed = cfg.camera_model, ctx.item["seed"]
    rng = seed_everything(seed)
    data, lat, zn = _load_train(ctx)
    tr, va = _split_episodes(len(zn), 0)
    t_max = zn.shape[1]
    all_t = camera_batch(data, zn, _pairs(tr, t_max, np.random.default_rng(7), 4096), cm.context)[-1]
    scale = all_t.std(0).clamp_min(1e-3)
    dev = stage_device(cfg)
    model = CameraModel(cm.context, inner_latent(zn[0, 0]).numel(), cm.hidden, cm.split_rotation).to(dev)
    val = to_device(camera_batch(data, zn, _pairs(va, t_max, np.random.default_rng(9), 512), cm.context), dev)
    scale_dev = scale.to(dev)

    def loss_fn(m, b):
        b = to_device(b, dev)
        with autocast(dev):
            pred = m(*b[:3])
        return ((pred.float() - b[3] / scale_dev) ** 2).mean()

    def batches():
        while True:
            yield camera_batch(data, zn, _pairs(tr, t_max, rng, cm.batch_size), cm.context)

    def evaluate(m):
        pred = m(*val[:3]) * scale_dev
        err = (pred - val[3]).abs().mean(0).cpu()
        return {"val/pos_mae": float(err[:3].mean()), "val/yaw_mae_deg": float(np.rad2deg(err[4])),
                "val/pitch_mae_deg": float(np.rad2deg(err[3]))}

    records = fit(model, batches(), loss_fn, steps=cm.steps, lr=cm.lr, warmup=cm.steps // 20, ctx=ctx,
                  eval_fn=evaluate, eval_every=max(1, cm.steps // 4), prefix="camera")
    save_torch(ctx.out_dir / "camera.pt", {"state": cpu_state(model), "scale": scale,
                                           "context": cm.context, "hidden": cm.hidden,
                                           "split_rotation": cm.split_rotation,
                                           "latent_dim": inner_latent(zn[0, 0]).numel()})
    last = records[-1]
    ctx.write_metrics({"final_loss": last["camera/loss"], "val_pos_mae": last["val/pos_mae"],
                       "val_yaw_mae_deg": last["val/yaw_mae_deg"], "val_pitch_mae_deg": last["val/pitch_mae_deg"]})


# ----------------------------------------------------------------------------- pixel models
def pixel_context_len(pm, variant: str) -> int:
    return pm.persist_context if variant == "persist" else pm.baseline_context


def pixel_cond(w2d: torch.Tensor | None, ctx_frames: torch.Tensor, ctx_tau: torch.Tensor) -> torch.Tensor:
    """Conditioning channels: [w_2D features], K context frames (each at its own noise level,
    diffusion forcing) and one constant channel per frame carrying that level."""
    b, k, _, h, w = ctx_frames.shape
    noisy = noise_context(ctx_frames.reshape(b * k, 3, h, w), ctx_tau.reshape(-1)).reshape(b, 3 * k, h, w)
    taus = ctx_tau.view(b, k, 1, 1).expand(b, k, h, w)
    parts = ([w2d] if w2d is not None else []) + [noisy, taus]
    return torch.cat(parts, 1)


def pixel_cond_channels(pm, variant: str, n_classes: int) -> int:
    k = pixel_context_len(pm, variant)
    return (pm.layers * (n_classes + 1 + 3 * pm.albedo) if variant == "persist" else 0) + 4 * k


def pixel_batch(data, lat, idx, pm, variant: str, view_distance: float, rng, train: bool = True):
    e, t = idx[:, 0], idx[:, 1]
    k = pixel_context_len(pm, variant)
    b = len(idx)
    target = to_unit(data["frames"][e, t])
    ctx_idx = np.stack([np.maximum(t - j, 0) for j in range(k, 0, -1)], 1)   # oldest first
    ctx_frames = to_unit(data["frames"][e[:, None], ctx_idx])
    ctx_tau = torch.as_tensor(rng.uniform(0, pm.ctx_noise_max, (b, k)), dtype=torch.float32) if train \
        else torch.full((b, k), pm.tau_ctx)
    acts = np.stack([np.where(t - j + 1 >= 1, data["actions"][e, np.maximum(t - j + 1, 0)], NOOP)
                     for j in range(k, 0, -1)], 1)
    w2d = None
    if variant == "persist":
        w2d = w2d_features(torch.as_tensor(lat["w2d_cls"][e, t]),
                           torch.as_tensor(lat["w2d_depth"][e, t].astype(np.float32)), view_distance,
                           pm.albedo)
        w2d = noise_context(w2d, pm.world_noise)       # cross-component noise on W
    return target, pixel_cond(w2d, ctx_frames, ctx_tau), torch.as_tensor(acts, dtype=torch.int64)


def pixel_loss(model: PixelUNet | DiTPixelModel, batch) -> torch.Tensor:
    dev = device_of(model)
    target, cond, acts = to_device(batch, dev)
    target = target - albedo_prior(model, cond)      # v4: P's flow runs on the residual
    tau = torch.rand(target.shape[0], device=dev)
    x_tau, x1 = rf_interpolate(target, tau)
    with autocast(dev):
        v = model(x_tau, tau, cond, acts)
    return rf_loss(v.float(), target, x1)


def build_pixel_model(pm, variant: str, frame: int) -> PixelUNet | DiTPixelModel:
    """``pixel_model.arch``: the small profile's U-Net, or a diffusers DiT (paper profile).
    P_theta and the baseline share the backbone either way; only the conditioning differs."""
    from components.persist.world import N_CLASSES

    cond, k = pixel_cond_channels(pm, variant, N_CLASSES), pixel_context_len(pm, variant)
    if pm.arch == "dit":
        d = pm.dit
        model = DiTPixelModel(cond, k, frame, d.layers, d.heads, d.head_dim, d.patch)
    else:
        model = PixelUNet(cond, k, pm.width)
    if variant == "persist" and pm.albedo and pm.albedo_residual:
        # the first w_2D layer's base colour: channels [K, K + 3) (w2d_features' layout)
        model.prior_channels = (N_CLASSES, N_CLASSES + 3)
    return model


def train_pixel_model_stage(cfg, ctx) -> None:
    """P_theta (variant persist) or the pixel-history baseline (variant baseline): the same
    backbone, optimiser, steps, batch and data."""
    _set_threads()
    pm, variant, seed = cfg.pixel_model, ctx.item.get("variant", "persist"), ctx.item["seed"]
    rng = seed_everything(seed)
    spec = env_spec(cfg.world)
    data = load_npz(ctx.inputs["rollout_env"] / "train.npz")
    lat = load_npz(ctx.inputs["encode_latents"] / "latents.npz") if variant == "persist" else None
    n_ep, t_max = data["frames"].shape[:2]
    tr, va = _split_episodes(n_ep, 0)
    model = build_pixel_model(pm, variant, cfg.world.frame).to(stage_device(cfg))
    val_rng = np.random.default_rng(321)
    val = pixel_batch(data, lat, _pairs(va, t_max, val_rng, 64), pm, variant, spec.view_distance, val_rng)

    def batches():
        while True:
            yield pixel_batch(data, lat, _pairs(tr, t_max, rng, pm.batch_size), pm, variant,
                              spec.view_distance, rng)

    def evaluate(m):
        torch.manual_seed(0)
        return {"val/rf_loss": float(pixel_loss(m, val))}

    records = fit(model, batches(), pixel_loss, steps=pm.steps, lr=pm.lr, warmup=pm.steps // 20,
                  ctx=ctx, eval_fn=evaluate, eval_every=max(1, pm.steps // 4), prefix=f"pixel_{variant}")
    save_torch(ctx.out_dir / "pixel.pt", {"state": cpu_state(model), "variant": variant})
    write_json_atomic(ctx.out_dir / "info.json", {"variant": variant, "n_params": count_params(model),
                                                  "backbone": backbone_name(model)})
    ctx.write_metrics({"final_loss": records[-1][f"pixel_{variant}/loss"],
                       "val_rf_loss": records[-1]["val/rf_loss"], "n_params": count_params(model)})


def train_baseline_stage(cfg, ctx) -> None:
    """The pixel-history baseline: ``train_pixel_model_stage`` with variant ``baseline`` (the
    same backbone, optimiser, steps, batch, data and seed as P). v6: a stage of its own that
    needs only the rollouts, so it trains while the 3D VAE and the latents are built."""
    ctx.item = {**ctx.item, "variant": "baseline"}
    train_pixel_model_stage(cfg, ctx)


# keep the names the evaluate stage imports in one place
__all__ = ["EYE_HEIGHT", "N_ACTIONS"]


def backbone_name(model: torch.nn.Module) -> str:
    """The class that does the denoising (``DiTTransformer2DModel`` for the diffusers DiT)."""
    return type(getattr(model, "dit", model)).__name__
