"""Torch modules at CPU scale: 3D VAE, world model W, camera model C, pixel model P, and the
rectified-flow objective / sampler shared by W and P (and the pixel-history baseline)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from components.common.diffusion import SinusoidalEmbedding
from components.persist.world import CAM_DIM, N_ACTIONS, N_CLASSES, PALETTE


# ----------------------------------------------------------------------------- rectified flow
def rf_interpolate(x0: torch.Tensor, tau: torch.Tensor, noise: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """x^tau = (1 - tau) x0 + tau x1 (tau = 0 is clean); returns (x^tau, x1)."""
    x1 = torch.randn_like(x0) if noise is None else noise
    t = tau.view(-1, *([1] * (x0.ndim - 1))) if isinstance(tau, torch.Tensor) and tau.ndim else tau
    return (1 - t) * x0 + t * x1, x1


def rf_loss(v_pred: torch.Tensor, x0: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
    """|| V(x^tau, tau) - (x0 - x1) ||^2."""
    return F.mse_loss(v_pred, x0 - x1)


def rf_timesteps(n_steps: int, eta: float = 3.0) -> list[float]:
    """tau_k = eta k / (1 + (eta - 1) k) for k evenly spaced from 1 to 0 (n_steps + 1 levels)."""
    ks = np.linspace(1.0, 0.0, n_steps + 1)
    return [float(eta * k / (1 + (eta - 1) * k)) for k in ks]


@torch.no_grad()
def rf_sample(velocity, shape: tuple[int, ...], n_steps: int, eta: float = 3.0,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """Euler integration of dx/dtau = -V from pure noise (tau = 1) to tau = 0.
    ``velocity(x, tau_batch)`` predicts x0 - x1."""
    x = torch.randn(shape, generator=generator)
    taus = rf_timesteps(n_steps, eta)
    for t, t_next in zip(taus[:-1], taus[1:]):
        tau = torch.full((shape[0],), t)
        x = x + (t - t_next) * velocity(x, tau)
    return x


def noise_context(x: torch.Tensor, tau: torch.Tensor | float) -> torch.Tensor:
    """Diffusion forcing: context at its own noise level (per sample)."""
    if not isinstance(tau, torch.Tensor):
        tau = torch.full((x.shape[0],), float(tau))
    return rf_interpolate(x, tau)[0]


# ----------------------------------------------------------------------------- 3D VAE
class VAE3D(nn.Module):
    """Deterministic 3D autoencoder (the KL term of the paper's VAE is negligible at 1e-6; we keep
    a small L2 on the latent instead): one-hot labels -> (m, X/4, Y/4, Z/4).

    ``arch = "conv"`` (v1/v2): strided 3D convs down, transposed convs up. It reconstructed no
    landmark voxel (a 1-voxel pillar is 1/64 of a cell and the strided convs smear it away;
    CLAIMS.md). ``arch = "patch"`` (v3): each 4^3 cell is embedded linearly from its one-hot
    voxels (every voxel has its own weights, so one rare voxel moves the cell's embedding), mixed
    with its neighbours by residual 3^3 convs at latent resolution, and decoded by a 1x1 conv to
    the 64 x K logits of the cell (unpatchify), like a ViT patch embedding in 3D."""

    PATCH = 4

    def __init__(self, latent_channels: int = 8, width: int = 32, n_classes: int = N_CLASSES,
                 arch: str = "conv"):
        super().__init__()
        w, p = width, self.PATCH
        self.n_classes, self.arch = n_classes, arch
        if arch == "conv":
            self.enc = nn.Sequential(
                nn.Conv3d(n_classes, w, 1), nn.SiLU(),          # per-voxel embedding at full res
                nn.Conv3d(w, w, 4, stride=2, padding=1), nn.SiLU(),
                nn.Conv3d(w, 2 * w, 4, stride=2, padding=1), nn.SiLU(),
                nn.Conv3d(2 * w, latent_channels, 1))
            self.dec = nn.Sequential(
                nn.Conv3d(latent_channels, 2 * w, 3, padding=1), nn.SiLU(),
                nn.ConvTranspose3d(2 * w, w, 4, stride=2, padding=1), nn.SiLU(),
                nn.ConvTranspose3d(w, w, 4, stride=2, padding=1), nn.SiLU(),
                nn.Conv3d(w, n_classes, 1))
        elif arch == "patch":
            h = 4 * w
            self.enc = nn.Sequential(
                nn.Conv3d(n_classes, h, p, stride=p), Res3d(h), Res3d(h), nn.Conv3d(h, latent_channels, 1))
            self.dec = nn.Sequential(
                nn.Conv3d(latent_channels, h, 1), Res3d(h), Res3d(h), nn.Conv3d(h, n_classes * p ** 3, 1),
                Unpatchify3d(n_classes, p))
        else:
            raise ValueError(f"unknown VAE arch {arch!r}")

    def encode(self, labels: torch.Tensor) -> torch.Tensor:
        x = F.one_hot(labels.long(), self.n_classes).permute(0, 4, 1, 2, 3).float()
        return self.enc(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.dec(z)  # logits (B, K, X, Y, Z)

    def loss(self, labels: torch.Tensor, l2: float = 1e-3,
             class_weight: torch.Tensor | None = None) -> torch.Tensor:
        z = self.encode(labels)
        return F.cross_entropy(self.decode(z), labels.long(), weight=class_weight) + l2 * z.pow(2).mean()


class Res3d(nn.Module):
    """Pre-activation residual block of two 3^3 convs (at latent resolution)."""

    def __init__(self, ch: int):
        super().__init__()
        self.body = nn.Sequential(nn.SiLU(), nn.Conv3d(ch, ch, 3, padding=1),
                                  nn.SiLU(), nn.Conv3d(ch, ch, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Unpatchify3d(nn.Module):
    """(B, K p^3, X, Y, Z) -> (B, K, pX, pY, pZ): channel (k, i, j, l) of cell (x, y, z) is
    voxel (p x + i, p y + j, p z + l) of class k."""

    def __init__(self, n_classes: int, p: int):
        super().__init__()
        self.k, self.p = n_classes, p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, nx, ny, nz = x.shape
        k, p = self.k, self.p
        x = x.view(b, k, p, p, p, nx, ny, nz).permute(0, 1, 5, 2, 6, 3, 7, 4)
        return x.reshape(b, k, nx * p, ny * p, nz * p)


def class_weights(labels: np.ndarray, power: float, n_classes: int = N_CLASSES) -> torch.Tensor | None:
    """Cross-entropy weights freq^-power, scaled so that the mean weight per voxel is 1: rare
    classes (the landmarks, ~1 % of voxels) are otherwise never reconstructed. None for 0."""
    if power == 0:
        return None
    freq = np.bincount(np.asarray(labels).ravel(), minlength=n_classes) / np.asarray(labels).size
    w = (freq + 1e-6) ** -power
    return torch.as_tensor(w / (w * freq).sum(), dtype=torch.float32)


# ----------------------------------------------------------------------------- helpers
def plucker(cams: np.ndarray, hw: tuple[int, int], patch: int) -> np.ndarray:
    """Plücker coordinates (d, o x d) of the ray through each patch centre: (B, 6, h, w)."""
    from components.persist.raycast import pixel_rays
    from components.persist.world import camera_from_vector

    out = []
    for c in cams:
        eye, f, r, u, fov = camera_from_vector(np.asarray(c, dtype=np.float64))
        d = pixel_rays(f, r, u, fov, hw)[patch // 2::patch, patch // 2::patch]
        d = d / np.linalg.norm(d, axis=-1, keepdims=True)
        m = np.cross(eye[None, None], d)
        out.append(np.concatenate([d, m / 8.0], axis=-1).transpose(2, 0, 1))
    return np.stack(out).astype(np.float32)


class AdaLNBlock(nn.Module):
    """Pre-norm transformer block with AdaLN-zero modulation, self- then cross-attention."""

    def __init__(self, d: int, heads: int, cond: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, elementwise_affine=False)
        self.ln2 = nn.LayerNorm(d, elementwise_affine=False)
        self.ln3 = nn.LayerNorm(d, elementwise_affine=False)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.xattn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.mod = nn.Linear(cond, 9 * d)
        nn.init.zeros_(self.mod.weight)
        nn.init.zeros_(self.mod.bias)

    def forward(self, x: torch.Tensor, mem: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        s1, b1, g1, s2, b2, g2, s3, b3, g3 = self.mod(c).unsqueeze(1).chunk(9, dim=-1)
        h = self.ln1(x) * (1 + s1) + b1
        x = x + (1 + g1) * self.attn(h, h, h, need_weights=False)[0]
        h = self.ln2(x) * (1 + s2) + b2
        x = x + (1 + g2) * self.xattn(h, mem, mem, need_weights=False)[0]
        h = self.ln3(x) * (1 + s3) + b3
        return x + (1 + g3) * self.mlp(h)


# ----------------------------------------------------------------------------- world model
class WorldModel(nn.Module):
    """V_theta(w^tau | w_prev (recentred), valid mask, action, cameras, latest frame).

    Tokens are latent voxel cells with absolute XYZ embeddings; the latest frame enters as
    patch tokens (RGB patch + Plücker ray of the patch centre) through cross-attention; action,
    cameras, the noise level tau and the context noise level through AdaLN. With an empty
    history (mode 1) the same network infers w_0 from o_0 and c_0.
    """

    def __init__(self, latent_channels: int, grid: tuple[int, int, int], frame: int,
                 d_model: int = 96, n_layers: int = 3, n_heads: int = 4, patch: int = 4,
                 context: int = 1):
        super().__init__()
        m = latent_channels
        self.grid, self.patch, self.frame, self.context = grid, patch, frame, context
        n_tok = grid[0] * grid[1] * grid[2]
        self.inp = nn.Linear(m + context * (m + 1), d_model)
        self.pos = nn.Parameter(torch.zeros(1, n_tok, d_model))
        coords = torch.stack(torch.meshgrid(*[torch.arange(g, dtype=torch.float32) for g in grid],
                                            indexing="ij"), -1).view(-1, 3)
        self.register_buffer("xyz", coords / max(grid))
        self.xyz_emb = nn.Sequential(nn.Linear(3, d_model), nn.SiLU(), nn.Linear(d_model, d_model))
        n_patch = (frame // patch) ** 2
        self.patch_in = nn.Linear(3 * patch * patch + 6, d_model)
        self.patch_pos = nn.Parameter(torch.zeros(1, n_patch, d_model))
        cond = d_model
        self.t_emb = nn.Sequential(SinusoidalEmbedding(64), nn.Linear(64, cond), nn.SiLU())
        self.ctx_emb = nn.Sequential(SinusoidalEmbedding(64), nn.Linear(64, cond), nn.SiLU())
        self.c_emb = nn.Sequential(nn.Linear(N_ACTIONS + 2 * CAM_DIM + 2, cond), nn.SiLU(),
                                   nn.Linear(cond, cond))
        self.blocks = nn.ModuleList(AdaLNBlock(d_model, n_heads, cond) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, m)
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.patch_pos, std=0.02)

    def forward(self, w_noisy, tau, w_prev, valid, action, cam_prev, cam_now, frame, frame_pl,
                ctx_tau, mode):
        """w_noisy (B, m, X, Y, Z); w_prev (B, K*m, X, Y, Z); valid (B, K, X, Y, Z); action (B,)
        long; cams (B, 10); frame (B, 3, H, W) in [-1, 1]; frame_pl (B, 6, h, w); ctx_tau (B,);
        mode (B,) 0 = step, 1 = infer w_0 from the frame alone."""
        b = w_noisy.shape[0]
        x = torch.cat([w_noisy, w_prev, valid], 1).flatten(2).transpose(1, 2)
        x = self.inp(x) + self.pos + self.xyz_emb(self.xyz)[None]
        p = self.patch
        patches = F.unfold(frame, p, stride=p).transpose(1, 2)
        mem = self.patch_in(torch.cat([patches, frame_pl.flatten(2).transpose(1, 2)], -1)) + self.patch_pos
        cvec = torch.cat([F.one_hot(action.long(), N_ACTIONS).float(), cam_prev, cam_now,
                          mode.float().view(-1, 1), (1 - mode.float()).view(-1, 1)], -1)
        c = self.t_emb(tau) + self.ctx_emb(ctx_tau) + self.c_emb(cvec)
        for blk in self.blocks:
            x = blk(x, mem, c)
        v = self.out(self.ln(x))
        return v.transpose(1, 2).reshape(b, -1, *self.grid)


# ----------------------------------------------------------------------------- camera model
class CameraModel(nn.Module):
    """Residual camera dynamics: (past K cameras, their actions, the inner latent) ->
    (d_pos[3], d_pitch, d_yaw, d_fov), trained with a per-component MSE."""

    def __init__(self, context: int, latent_dim: int, hidden: int = 128, split_rotation: bool = False):
        super().__init__()
        self.context, self.split_rotation, self.latent_dim = context, split_rotation, latent_dim
        self.net = nn.Sequential(
            nn.Linear(context * (CAM_DIM + 2) + context * N_ACTIONS + latent_dim, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 6))
        if split_rotation:
            # v6: the rotation residual (d_pitch, d_yaw, d_fov) from the past cameras and actions
            # only; the world latent (collisions) feeds the position residual alone
            self.rot = nn.Sequential(
                nn.Linear(context * (CAM_DIM + 2) + context * N_ACTIONS, hidden), nn.SiLU(),
                nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 3))

    @staticmethod
    def cam_features(cams: torch.Tensor) -> torch.Tensor:
        """(…, 10) -> (…, 12): camera vector plus sin/cos of yaw (helps the MLP rotate)."""
        yaw = torch.atan2(cams[..., 4], cams[..., 3])
        return torch.cat([cams, torch.sin(yaw)[..., None], torch.cos(yaw)[..., None]], -1)

    def forward(self, cams: torch.Tensor, actions: torch.Tensor, inner: torch.Tensor) -> torch.Tensor:
        """cams (B, K, 10) past cameras (last = t-1); actions (B, K) long, last = a_t;
        inner (B, D) flattened inner latent."""
        x = torch.cat([self.cam_features(cams).flatten(1),
                       F.one_hot(actions.long(), N_ACTIONS).float().flatten(1)], -1)
        out = self.net(torch.cat([x, inner], -1))
        if self.split_rotation:
            out = torch.cat([out[:, :3], self.rot(x)], -1)
        return out


# ----------------------------------------------------------------------------- pixel model
class FiLMRes(nn.Module):
    def __init__(self, cin: int, cout: int, cond: int):
        super().__init__()
        self.n1 = nn.GroupNorm(8 if cin % 8 == 0 else 1, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.n2 = nn.GroupNorm(8 if cout % 8 == 0 else 1, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.film = nn.Linear(cond, 2 * cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, c):
        h = self.c1(F.silu(self.n1(x)))
        s, b = self.film(c)[:, :, None, None].chunk(2, 1)
        h = self.n2(h) * (1 + s) + b
        return self.skip(x) + self.c2(F.silu(h))


class PixelUNet(nn.Module):
    """V_theta(o^tau | conditioning channels, actions, tau): a two-level U-Net with FiLM.
    The same backbone serves P_theta (conditioning = w_2D + 2 frames) and the pixel-history
    baseline (conditioning = 8 frames); only ``cond_channels`` differ."""

    def __init__(self, cond_channels: int, n_actions_ctx: int, width: int = 32):
        super().__init__()
        w, cd = width, 4 * width
        self.t_emb = nn.Sequential(SinusoidalEmbedding(64), nn.Linear(64, cd), nn.SiLU())
        self.a_emb = nn.Sequential(nn.Linear(n_actions_ctx * N_ACTIONS, cd), nn.SiLU(), nn.Linear(cd, cd))
        self.inp = nn.Conv2d(3 + cond_channels, w, 3, padding=1)
        self.d1 = FiLMRes(w, w, cd)
        self.down1 = nn.Conv2d(w, 2 * w, 4, stride=2, padding=1)
        self.d2 = FiLMRes(2 * w, 2 * w, cd)
        self.down2 = nn.Conv2d(2 * w, 2 * w, 4, stride=2, padding=1)
        self.mid1 = FiLMRes(2 * w, 2 * w, cd)
        self.mid2 = FiLMRes(2 * w, 2 * w, cd)
        self.up2 = nn.ConvTranspose2d(2 * w, 2 * w, 4, stride=2, padding=1)
        self.u2 = FiLMRes(4 * w, 2 * w, cd)
        self.up1 = nn.ConvTranspose2d(2 * w, w, 4, stride=2, padding=1)
        self.u1 = FiLMRes(2 * w, w, cd)
        self.out = nn.Conv2d(w, 3, 3, padding=1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x_noisy, tau, cond, actions):
        c = self.t_emb(tau) + self.a_emb(F.one_hot(actions.long(), N_ACTIONS).float().flatten(1))
        h0 = self.inp(torch.cat([x_noisy, cond], 1))
        h1 = self.d1(h0, c)
        h2 = self.d2(self.down1(h1), c)
        h = self.mid2(self.mid1(self.down2(h2), c), c)
        h = self.u2(torch.cat([self.up2(h), h2], 1), c)
        h = self.u1(torch.cat([self.up1(h), h1], 1), c)
        return self.out(h)


class DiTPixelModel(nn.Module):
    """P_theta and the baseline as a diffusers ``DiTTransformer2DModel`` (the paper profile's
    backbone family: a DiT with AdaLN-zero). Same call as ``PixelUNet``: the conditioning
    channels and one constant plane per (context action, action id) are concatenated to the
    noisy frame; the current action a_t is the DiT's class label and tau * 1000 its timestep.
    diffusers' label embedding drops the label with p = 0.1 in training (its CFG default)."""

    def __init__(self, cond_channels: int, n_actions_ctx: int, frame: int, layers: int, heads: int,
                 head_dim: int, patch: int):
        super().__init__()
        from diffusers import DiTTransformer2DModel

        self.n_actions_ctx = n_actions_ctx
        self.dit = DiTTransformer2DModel(
            num_attention_heads=heads, attention_head_dim=head_dim, num_layers=layers,
            in_channels=3 + cond_channels + n_actions_ctx * N_ACTIONS, out_channels=3,
            sample_size=frame, patch_size=patch, num_embeds_ada_norm=N_ACTIONS)

    def forward(self, x_noisy, tau, cond, actions):
        b, _, h, w = x_noisy.shape
        planes = F.one_hot(actions.long(), N_ACTIONS).to(x_noisy.dtype).flatten(1)
        planes = planes[:, :, None, None].expand(b, planes.shape[1], h, w)
        inp = torch.cat([x_noisy, cond, planes], 1)
        return self.dit(inp, timestep=tau * 1000, class_labels=actions[:, -1].long()).sample


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def w2d_features(cls: torch.Tensor, depth: torch.Tensor, view_distance: float,
                 albedo: bool = False) -> torch.Tensor:
    """(B, L, H, W) classes + depths -> (B, L*(K+1[+3]), H, W): one-hot class (air = no layer),
    [the class's base colour,] depth scaled to [0, 1]. The base colour (a G-buffer albedo) is a
    fixed linear map of the one-hot (PALETTE^T one_hot): no new information, a shorter path from
    a voxel's class to its colour for a small P (v2's P drew a landmark's colour from the true
    w_2D on ~half of its pixels; CLAIMS.md)."""
    b, l, h, w = cls.shape
    oh = F.one_hot(cls.long(), N_CLASSES).permute(0, 1, 4, 2, 3).float()
    d = (depth / view_distance).unsqueeze(2)
    parts = [oh] + ([torch.einsum("blkhw,kc->blchw", oh, torch.as_tensor(PALETTE))] if albedo else []) + [d]
    return torch.cat(parts, 2).reshape(b, l * sum(p.shape[2] for p in parts), h, w)


def albedo_prior(model: nn.Module, cond: torch.Tensor) -> torch.Tensor | float:
    """The frame a pixel model's sample is a residual on (v4): the first w_2D layer's base colour
    in [-1, 1] (an unshaded, untextured G-buffer render of the world state) when the model was
    built with ``prior_channels``, else 0 (the baseline, and P before v4). The rectified flow then
    runs on x0 - prior: P adds shading, texture and fog to the state's colours instead of having
    to carry a rare landmark colour from its input to its output (CLAIMS.md, v4)."""
    sl = getattr(model, "prior_channels", None)
    return 0.0 if sl is None else cond[:, sl[0]:sl[1]] * 2 - 1


def to_unit(frames_u8: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 (..., H, W, 3) -> float (..., 3, H, W) in [-1, 1]."""
    x = torch.as_tensor(np.asarray(frames_u8), dtype=torch.float32) / 127.5 - 1
    return x.movedim(-1, -3)



# ----------------------------------------------------------------------------- devices
def to_device(obj, device):
    """Tensors of a batch (a tensor, or a dict / tuple / list of them) on ``device``; on the
    CPU this is the identity, so the small profile's numbers do not move."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def device_of(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


def autocast(device: torch.device):
    """bf16 autocast on a CUDA device that has it (the paper profile); nothing on the CPU."""
    import contextlib

    from components.common.devices import resolve_dtype

    if device.type == "cuda" and resolve_dtype(device) == torch.bfloat16:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class OnDevice:
    """Runs a trained module on ``device`` while the rollout code keeps CPU tensors: inputs go
    to the device, the output comes back as float32 on the CPU. Attributes are the module's."""

    def __init__(self, module: nn.Module, device: torch.device):
        self.module, self.device = module.to(device).eval(), device

    def __call__(self, *args):
        with autocast(self.device):
            out = self.module(*to_device(args, self.device))
        return out.float().cpu()

    def __getattr__(self, name: str):
        return getattr(self.module, name)
