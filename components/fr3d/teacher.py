"""CUT3R-tiny: the stand-in for the frozen 3D foundation model (pre-trained here, then frozen).

Per frame, a patch-8 CNN encoder turns the image, its difference to the previous frame and a
small cost volume of the frame pair (matching costs at horizontal and vertical pixel shifts: the
cues for ego-motion that a pose network's frame pair gives) and normalised pixel coordinates
(so any image shape works) into spatial tokens. A learned pose query joins them; the tokens read a
persistent recurrent state (16 x 64) by cross-attention, mix by self-attention, and the state
is written back from the tokens (CUT3R's read/write). Outputs per frame: the pose token z_t and
the state-augmented spatial tokens F_t. Heads: depth (8x8 log-depth patch per token, after an
optional 3x3 convolution over the token grid that lets a patch see its neighbours), pose
(motion since the previous frame: 6D rotation + translation), horizontal field of view.
The stateless encoder output (no recurrent state) is also exposed: it is the "2D feature" of the
DINO-Foresight-like baseline.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as fn

from components.common.io import load_npz, load_torch, read_json, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit
from components.fr3d.adapter import build_tiny, load_teacher_checkpoint, read_adapter_config
from components.common.transformer import CrossBlock
from components.fr3d.data import is_pretrain
from components.fr3d.geometry import matrix_to_rot6d, pose_from_9d, relative_poses
from components.fr3d.nn import MLP, SelfBlock

PATCH = 8
IDENTITY_9D = torch.tensor([1.0, 0, 0, 0, 1, 0, 0, 0, 0])
DIFF_GAIN = 8.0
COST_GAIN = 4.0
TEACHER_REF = "teacher_ref.json"     # paper profile: which checkpoint folder is the teacher


class DepthHead(nn.Module):
    """Spatial tokens (..., h*w, dim) on an (h, w) grid -> an 8x8 log-depth patch per token.
    ``context`` residual 3x3 convolutions over the token grid first let each patch see its
    neighbours (as a DPT head fuses neighbouring tokens), so depth can be continuous across
    patch borders; with ``context=0`` every token is decoded on its own (v2-v5)."""

    def __init__(self, dim: int, context: int = 0):
        super().__init__()
        self.mix = nn.ModuleList(nn.Conv2d(dim, dim, 3, padding=1) for _ in range(context))
        self.mlp = MLP(dim, 2 * dim, PATCH * PATCH)
        nn.init.constant_(self.mlp[-1].bias, float(np.log(15.0)))

    def forward(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        if len(self.mix):
            h, w = grid
            lead, dim = tokens.shape[:-2], tokens.shape[-1]
            x = tokens.reshape(-1, h, w, dim).permute(0, 3, 1, 2)
            for conv in self.mix:
                x = x + conv(fn.gelu(x))
            tokens = x.permute(0, 2, 3, 1).reshape(*lead, h * w, dim)
        return self.mlp(tokens)


def depth_head(dim: int, context: int = 0) -> DepthHead:
    return DepthHead(dim, context)


def n_shift_costs(max_shift: int) -> int:
    return 0 if max_shift <= 0 else (2 * max_shift + 1) + 2 * (max_shift // 2)


def shift_costs(rgb: torch.Tensor, prev: torch.Tensor, max_shift: int) -> torch.Tensor:
    """Per-pixel matching cost |frame(x) - previous(x + s)| (mean over colour) for horizontal
    shifts s in -max..max and vertical shifts in +-1..max/2 pixels: a small cost volume, the
    evidence a pose network reads camera rotation (mostly horizontal image motion) from."""
    h, w = rgb.shape[-2:]
    mv = max_shift // 2
    padded = fn.pad(prev, (max_shift, max_shift, mv, mv), mode="replicate")
    costs = [(rgb - padded[..., mv:mv + h, max_shift + s:max_shift + s + w]).abs().mean(1)
             for s in range(-max_shift, max_shift + 1)]
    costs += [(rgb - padded[..., mv + s:mv + s + h, max_shift:max_shift + w]).abs().mean(1)
              for s in range(-mv, mv + 1) if s]
    # stacked last, viewed as (B, K, H, W): channels-last memory, as the encoder wants it
    return torch.stack(costs, -1).permute(0, 3, 1, 2)


def unpatchify(patches: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(..., h*w, 64) per-token 8x8 patches -> (..., 8h, 8w)."""
    lead = patches.shape[:-2]
    x = patches.reshape(-1, h, w, PATCH, PATCH).permute(0, 1, 3, 2, 4)
    return x.reshape(*lead, h * PATCH, w * PATCH)


class TinyCUT3R(nn.Module):
    patch = PATCH

    def __init__(self, dim: int = 64, state_tokens: int = 16, heads: int = 4,
                 mix_layers: int = 1, max_shift: int = 0, depth_context: int = 0):
        super().__init__()
        self.dim, self.max_shift, self.depth_context = dim, max_shift, depth_context
        self.encoder = nn.Sequential(
            nn.Conv2d(8 + n_shift_costs(max_shift), 32, 3, 2, 1), nn.GELU(),
            nn.Conv2d(32, 48, 3, 2, 1), nn.GELU(),
            nn.Conv2d(48, dim, 3, 2, 1), nn.GELU(), nn.Conv2d(dim, dim, 1))
        self.state0 = nn.Parameter(torch.randn(state_tokens, dim) * 0.02)
        self.pose_query = nn.Parameter(torch.randn(dim) * 0.02)
        self.pose_pool = nn.Linear(dim, dim)        # pooled frame-pair evidence -> pose query
        self.read = CrossBlock(dim, heads, ff_mult=4)
        self.mix = nn.Sequential(*(SelfBlock(dim, heads) for _ in range(mix_layers)))
        self.write = CrossBlock(dim, heads, ff_mult=4)
        self.depth_head = depth_head(dim, depth_context)
        self.pose_head = MLP(dim, 2 * dim, 9)
        nn.init.zeros_(self.pose_head[-1].weight)
        nn.init.zeros_(self.pose_head[-1].bias)
        self.fov_head = MLP(dim, dim, 1)

    def encode(self, rgb: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """Frame (B, 3, H, W) in [0, 1] and the previous frame -> stateless 2D tokens (B, h*w, dim)."""
        b, _, h, w = rgb.shape
        ys = (torch.arange(h, dtype=rgb.dtype) + 0.5 - h / 2) / (w / 2)
        xs = (torch.arange(w, dtype=rgb.dtype) + 0.5 - w / 2) / (w / 2)
        yy, xx = torch.meshgrid(ys, xs, indexing="ij")
        coords = torch.stack([xx, yy]).expand(b, 2, h, w)
        # the difference is amplified: a one-pixel shift changes few intensities by little
        parts = [rgb * 2 - 1, (rgb - prev) * DIFF_GAIN, coords]
        if self.max_shift:
            parts.append(shift_costs(rgb, prev, self.max_shift) * COST_GAIN)
        # channels-last (B, H, W, C) memory: the same convolutions, faster on CPU (oneDNN)
        x = torch.cat([p.permute(0, 2, 3, 1) for p in parts], -1).permute(0, 3, 1, 2)
        feats = self.encoder(x)
        return feats.permute(0, 2, 3, 1).flatten(1, 2)     # (B, h*w, dim): a view, channels-last

    def step(self, enc: torch.Tensor, state: torch.Tensor, write: bool = True):
        # the pose query starts from the image-wide mean of the frame-pair features (camera
        # motion moves every pixel), then reads the state and the tokens
        query = self.pose_query + self.pose_pool(enc.mean(1))
        x = torch.cat([query[:, None], enc], 1)
        x = self.mix(self.read(x, state))
        if write:
            state = self.write(state, x)
        return x[:, 0], x[:, 1:], state

    def forward(self, rgb: torch.Tensor):
        """(B, T, 3, H, W) -> z (B, T, dim), F (B, T, n, dim), enc (B, T, n, dim)."""
        b, t = rgb.shape[:2]
        prev = torch.cat([rgb[:, :1], rgb[:, :-1]], 1)     # the first frame is its own previous
        enc = self.encode(rgb.flatten(0, 1), prev.flatten(0, 1)).unflatten(0, (b, t))
        state = self.state0.expand(b, -1, -1)
        zs, fs = [], []
        for k in range(t):
            # the state after the last frame is never read: its write is skipped
            z, f, state = self.step(enc[:, k], state, write=k < t - 1)
            zs.append(z)
            fs.append(f)
        return torch.stack(zs, 1), torch.stack(fs, 1), enc

    # frozen heads -------------------------------------------------------------------------
    def decode_depth(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        return unpatchify(self.depth_head(tokens, grid), *grid).exp()

    def decode_pose9(self, z: torch.Tensor) -> torch.Tensor:
        return self.pose_head(z) + IDENTITY_9D.to(z)

    def decode_pose(self, z: torch.Tensor) -> torch.Tensor:
        """Motion since the previous frame as a 4x4 (camera t in camera t-1)."""
        return pose_from_9d(self.decode_pose9(z))

    def decode_fov(self, z: torch.Tensor) -> torch.Tensor:
        return self.fov_head(z).squeeze(-1) + 1.2


def silog_loss(pred_log: torch.Tensor, gt: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Scale-invariant log loss (Eigen et al.) per image, with a small absolute-scale anchor."""
    d = (pred_log - torch.log(gt.clamp(min=1e-3))) * valid
    n = valid.flatten(1).sum(1).clamp(min=1)
    mean = d.flatten(1).sum(1) / n
    sq = (d ** 2).flatten(1).sum(1) / n
    return (torch.sqrt((sq - 0.85 * mean ** 2).clamp(min=1e-8)) + 0.1 * mean.abs()).mean()


def to_tensor_rgb(rgb: np.ndarray) -> torch.Tensor:
    """uint8 (..., H, W, 3) -> float (..., 3, H, W) in [0, 1]."""
    return torch.from_numpy(rgb).float().div(255).movedim(-1, -3)


def check_no_leak(manifest: list[dict], scenes_cfg) -> None:
    """Zero-shot domains must stay out of pre-training: neither their image shape nor their
    exact field of view may appear in the teacher's data."""
    for split in ("kitti_like", "nuscenes_like"):
        dom = getattr(scenes_cfg, split)
        for group in manifest:
            if (group["height"], group["width"]) == (dom.height, dom.width):
                raise ValueError(f"teacher pre-training contains {split}'s image shape "
                                 f"{dom.height}x{dom.width}: the zero-shot domain leaked")
            if any(abs(f - dom.fov_deg) < 1e-6 for f in group["fovs"]):
                raise ValueError(f"teacher pre-training contains {split}'s exact fov {dom.fov_deg}")


def check_clip_length(tc, sc) -> None:
    """The teacher's recurrence must be trained on clips as long as the sequences it encodes
    (a state never trained past frame k drifts after it)."""
    longest = max(getattr(sc, s).n_frames for s in ("train", "test", "kitti_like", "nuscenes_like"))
    if min(tc.clip_frames, sc.pretrain_frames) < longest:
        raise ValueError(f"teacher.clip_frames={tc.clip_frames} / scenes.pretrain_frames="
                         f"{sc.pretrain_frames} shorter than the {longest}-frame sequences it encodes")


def clip_scaled(trans: torch.Tensor, floor: float = 0.05) -> torch.Tensor:
    """Translations (B, T, 3) in units of their clip's mean step length (DUSt3R / CUT3R
    normalise the scale of their regression targets the same way): the pose head learns the
    direction and the relative step length, not the metric speed, which one low-resolution
    frame pair shows only noisily and which the Sim(3)-aligned ATE ignores. A standing clip
    (mean step below ``floor`` m) keeps its near-zero steps."""
    unit = trans.norm(dim=-1).mean(1).clamp(min=floor)
    return trans / unit[:, None, None]


def teacher_args(tc) -> dict:
    """Constructor arguments of the teacher (saved with its weights)."""
    return {"dim": tc.dim, "state_tokens": tc.state_tokens, "heads": tc.heads,
            "mix_layers": tc.mix_layers, "max_shift": tc.max_shift,
            "depth_context": tc.depth_context}


def pretrain_teacher_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:
        return adopt_teacher_checkpoint(cfg, ctx)
    tc, sc = cfg.teacher, cfg.scenes
    check_clip_length(tc, sc)
    render_dirs = [d for s, d in sorted(ctx.inputs["render"].items()) if is_pretrain(s)]
    if not render_dirs:
        raise ValueError("no pre-training split (scenes.splits needs pretrain or pretrain_<k>)")
    for render_dir in render_dirs:
        check_no_leak(read_json(render_dir / "manifest.json"), sc)
    rng = seed_everything(tc.seed)
    groups = [load_npz(p) for d in render_dirs for p in sorted(d.glob("*.npz"))]
    sizes = np.array([len(g["rgb"]) for g in groups], dtype=float)
    for g in groups:
        g["rel9"] = np.concatenate([matrix_to_rot6d(torch.from_numpy(
            relative_poses(g["pose"].astype(np.float64))[..., :3, :3])).numpy(),
            relative_poses(g["pose"].astype(np.float64))[..., :3, 3]], -1).astype(np.float32)
    model = TinyCUT3R(**teacher_args(tc))

    def batches():
        while True:
            g = groups[rng.choice(len(groups), p=sizes / sizes.sum())]
            n, t = g["rgb"].shape[:2]
            clip = min(tc.clip_frames, t)
            idx = rng.integers(0, n, tc.batch_size)
            start = rng.integers(0, t - clip + 1, tc.batch_size)
            sel = (idx[:, None], start[:, None] + np.arange(clip)[None])
            yield (to_tensor_rgb(g["rgb"][sel]), torch.from_numpy(g["depth"][sel]),
                   torch.from_numpy(g["rel9"][sel]), torch.from_numpy(g["fov"][idx]))

    def loss_fn(m, batch):
        rgb, depth, rel9, fov = batch
        z, f, _ = m(rgb)
        h, w = rgb.shape[-2] // PATCH, rgb.shape[-1] // PATCH
        pred_log = unpatchify(m.depth_head(f, (h, w)), h, w)
        valid = (depth > 0).float()
        l_depth = silog_loss(pred_log.flatten(0, 1), depth.flatten(0, 1), valid.flatten(0, 1))
        pose9 = m.decode_pose9(z)
        # the first frame of a clip has no previous frame: its motion is undefined
        # rotation weighted up: a small yaw-rate error bends the whole chained trajectory
        trans_gt = clip_scaled(rel9[:, 1:, 6:]) if tc.trans_scale == "clip" else rel9[:, 1:, 6:]
        l_pose = (tc.rot_weight * fn.l1_loss(pose9[:, 1:, :6], rel9[:, 1:, :6])
                  + fn.l1_loss(pose9[:, 1:, 6:], trans_gt))
        l_fov = fn.l1_loss(m.decode_fov(z).mean(1), torch.deg2rad(fov))
        return l_depth + tc.pose_weight * l_pose + tc.fov_weight * l_fov

    records = fit(model, batches(), loss_fn, steps=tc.steps, lr=tc.lr, warmup=tc.steps // 20,
                  weight_decay=1e-4, ctx=ctx, prefix="teacher", log_every=25)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    save_torch(ctx.out_dir / "teacher.pt", {"state_dict": model.state_dict(), **teacher_args(tc)})
    n_params = sum(p.numel() for p in model.parameters())
    write_json_atomic(ctx.out_dir / "summary.json", {"n_params": n_params})
    ctx.write_metrics({"final_loss": records[-1]["teacher/loss"], "n_params": n_params})


def adopt_teacher_checkpoint(cfg, ctx) -> None:
    """Paper profile: no pre-training; the user's frozen teacher checkpoint is loaded through
    the adapter (checked there) and referenced, so later stages load the same weights."""
    folder = Path(cfg.paper.cut3r_checkpoint).expanduser().resolve()
    model = load_teacher_checkpoint(folder)
    for h_w in cfg.paper.image_size:
        if h_w % model.patch:
            raise ValueError(f"paper.image_size {cfg.paper.image_size} is not a multiple of the "
                             f"teacher's patch {model.patch}")
    n_params = sum(p.numel() for p in model.parameters())
    write_json_atomic(ctx.out_dir / TEACHER_REF, {"checkpoint": str(folder),
                                                  "adapter": read_adapter_config(folder)["adapter"]})
    write_json_atomic(ctx.out_dir / "summary.json", {"n_params": n_params})
    ctx.write_metrics({"n_params": n_params})


def load_teacher(teacher_dir):
    """The frozen teacher of a pretrain_teacher output: trained here, or a referenced checkpoint."""
    if (teacher_dir / TEACHER_REF).is_file():
        return load_teacher_checkpoint(read_json(teacher_dir / TEACHER_REF)["checkpoint"])
    blob = load_torch(teacher_dir / "teacher.pt")
    model = build_tiny(blob)
    model.load_state_dict(blob["state_dict"])
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model
