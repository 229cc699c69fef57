"""Perception: a frozen low-level front end, a learned clip encoder, and a belief head over an
arbitrary set of observed frames.

A frame t that the agent has observed becomes one clip: descriptors of the frame itself and,
when frame t-1 was observed too (a "motion" clip), of the difference to it, plus a flag saying
which. The front end is fixed and translation invariant (brightest pixels, pixel counts over
thresholds, spread of the bright region, strongest changes and the distance between the
strongest positive and negative change) - our cheap stand-in for a frozen CNN, since a learned
conv net over every clip did not fit this machine's CPU budget. The clip encoder (an MLP) and the
belief head, which pools clip embeddings (mean and max) into class probabilities, are trained
with video-level labels only, on random observation patterns (dense, uniform grids, scan +
random dense windows, single clips), so the head learns the posterior given *what was seen*.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from components.anompi.config import CLASSES

N_CLASSES = len(CLASSES)
N_STATIC, N_MOTION = 12, 16
N_DESC = N_STATIC + N_MOTION + 1


def _top(x: np.ndarray, k: int) -> np.ndarray:
    """The k largest values of each row, in decreasing order."""
    part = np.partition(x, x.shape[1] - k, axis=1)[:, -k:]
    return -np.sort(-part, axis=1)


def _static_desc(f: np.ndarray, size: int) -> np.ndarray:
    """f: (n, P) frames in [0, 1] -> (n, N_STATIC)."""
    top = _top(f, 6)
    counts = np.stack([(f > t).mean(1) * 10 for t in (0.55, 0.7, 0.85)], 1)
    w = np.clip(f - 0.8, 0, None)        # the actor and objects, not the dim walkers
    ys, xs = np.divmod(np.arange(f.shape[1]), size)
    m = w.sum(1, keepdims=True) + 1e-6
    my, mx = (w * ys).sum(1, keepdims=True) / m, (w * xs).sum(1, keepdims=True) / m
    vy = (w * (ys - my) ** 2).sum(1) / m[:, 0]
    vx = (w * (xs - mx) ** 2).sum(1) / m[:, 0]
    spread = np.stack([vy / 4, vx / 4, np.log((vx + 0.1) / (vy + 0.1))], 1)
    return np.concatenate([top, counts, spread], 1)


def _motion_desc(f: np.ndarray, d: np.ndarray, size: int) -> np.ndarray:
    """f: (n, P) frames, d: (n, P) difference to the previous frame -> (n, N_MOTION)."""
    a = np.abs(d)
    top = _top(a, 6) * 3
    pos = _top(d, 3) * 3
    neg = _top(-d, 3) * 3
    counts = np.stack([(a > t).mean(1) * 10 for t in (0.15, 0.3)], 1)
    ip, ineg = d.argmax(1), d.argmin(1)
    (py, px), (ny, nx) = np.divmod(ip, size), np.divmod(ineg, size)
    disp = np.hypot(py - ny, px - nx) / 4
    at_bright = np.take_along_axis(a, f.argmax(1)[:, None], 1)[:, 0] * 3
    return np.concatenate([top, pos, neg, counts, disp[:, None], at_bright[:, None]], 1)


def descriptors(frames_u8: np.ndarray, chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(N, T, s, s) uint8 -> static (N, T, N_STATIC) and motion (N, T, N_MOTION) float16;
    the motion descriptor of frame t uses frame t-1 (zero at t = 0)."""
    N, T, s, _ = frames_u8.shape
    st = np.empty((N, T, N_STATIC), np.float16)
    mo = np.empty((N, T, N_MOTION), np.float16)
    for i in range(0, N, chunk):
        f = frames_u8[i:i + chunk].reshape(-1, T, s * s).astype(np.float32) / 255.0
        d = np.zeros_like(f)
        d[:, 1:] = f[:, 1:] - f[:, :-1]
        n = f.shape[0]
        st[i:i + n] = _static_desc(f.reshape(-1, s * s), s).reshape(n, T, N_STATIC)
        mo[i:i + n] = _motion_desc(f.reshape(-1, s * s), d.reshape(-1, s * s), s).reshape(n, T, N_MOTION)
    return st, mo


def clip_inputs(static: torch.Tensor, motion_desc: torch.Tensor, motion: torch.Tensor) -> torch.Tensor:
    """Encoder input of each clip: static part, motion part (zeroed for static clips), flag."""
    m = motion[..., None].float()
    return torch.cat([static.float(), motion_desc.float() * m, m], -1)


class ClipEncoder(nn.Module):
    def __init__(self, emb_dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(N_DESC, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, emb_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BeliefHead(nn.Module):
    def __init__(self, emb_dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * emb_dim + 1, hidden), nn.ReLU(),
                                 nn.Linear(hidden, N_CLASSES))

    def forward(self, emb: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """emb: (B, T, d) clip embeddings; obs: (B, T) bool -> class logits (B, C).
        Only observed clips enter (mean + max pooling); an empty set gives the prior."""
        m = obs[..., None].float()
        n = m.sum(1)
        mean = (emb * m).sum(1) / n.clamp(min=1)
        mx = torch.where(obs[..., None], emb, torch.full_like(emb, -1e4)).amax(1)
        mx = torch.where(n > 0, mx, torch.zeros_like(mx))
        return self.net(torch.cat([mean, mx, torch.log1p(n) / 6.0], -1))


def motion_mask(obs: torch.Tensor) -> torch.Tensor:
    """Frame t is a motion clip when t and t-1 are both observed."""
    prev = torch.zeros_like(obs)
    prev[:, 1:] = obs[:, :-1]
    return obs & prev


def random_masks(rng: np.random.Generator, B: int, T: int, n_anchors: int, fine_len: int) -> np.ndarray:
    """Observation patterns the belief head is trained on (no label information used)."""
    obs = np.zeros((B, T), bool)
    for b in range(B):
        kind = rng.random()
        if kind < 0.15:                                  # dense
            obs[b] = True
        elif kind < 0.4:                                 # uniform grid, random size/phase
            k = int(rng.integers(4, T // 3))
            obs[b, (rng.uniform(0, T / k) + np.arange(k) * T / k).astype(int) % T] = True
        elif kind < 0.8:                                 # scan + random dense windows
            obs[b, ((np.arange(n_anchors) + 0.5) * T / n_anchors).astype(int)] = True
            for _ in range(int(rng.integers(1, 7))):
                s = int(rng.integers(0, T - fine_len + 1))
                obs[b, s:s + fine_len] = True
        elif kind < 0.9:                                 # one contiguous chunk
            L = int(rng.integers(2, T // 2))
            s = int(rng.integers(0, T - L + 1))
            obs[b, s:s + L] = True
        else:                                            # a single clip (static or motion)
            t = int(rng.integers(1, T))
            obs[b, t] = True
            if rng.random() < 0.5:
                obs[b, t - 1] = True
    return obs


def train_perception(desc: tuple[np.ndarray, np.ndarray], labels: np.ndarray, pcfg, policy_cfg,
                     ctx=None) -> tuple[ClipEncoder, BeliefHead, list[float]]:
    from components.common.train import fit

    rng = np.random.default_rng(pcfg.seed)
    torch.manual_seed(pcfg.seed)
    static, motion_d = desc
    N, T = static.shape[:2]
    enc = ClipEncoder(pcfg.emb_dim, pcfg.hidden)
    head = BeliefHead(pcfg.emb_dim, pcfg.hidden)
    model = nn.ModuleDict({"encoder": enc, "head": head})
    y_all = torch.as_tensor(labels)

    def batches():
        while True:
            idx = rng.integers(0, N, pcfg.batch_videos)
            obs = torch.as_tensor(random_masks(rng, len(idx), T, policy_cfg.n_anchors,
                                               policy_cfg.fine_len))
            yield torch.as_tensor(static[idx]), torch.as_tensor(motion_d[idx]), obs, y_all[idx]

    def loss_fn(m, batch):
        st, mo, obs, y = batch
        x = clip_inputs(st, mo, motion_mask(obs))
        emb = torch.zeros(*obs.shape, pcfg.emb_dim)
        emb[obs] = m["encoder"](x[obs])          # unobserved clips are never encoded
        return nn.functional.cross_entropy(m["head"](emb, obs), y)

    records = fit(model, batches(), loss_fn, steps=pcfg.steps, lr=pcfg.lr, warmup=pcfg.steps // 20,
                  ctx=ctx, log_every=max(1, pcfg.steps // 50), prefix="perception")
    return enc, head, [r["perception/loss"] for r in records]


@torch.no_grad()
def encode_videos(enc: ClipEncoder, head: BeliefHead, desc: tuple[np.ndarray, np.ndarray],
                  chunk: int = 256) -> dict[str, np.ndarray]:
    """Per-frame cache: static and motion clip embeddings, and single-clip saliency
    (1 - p(normal) of the belief head given that one clip alone)."""
    static, motion_d = desc
    N, T = static.shape[:2]
    out = {k: [] for k in ("emb_static", "emb_motion", "sal_static", "sal_motion")}
    for i in range(0, N, chunk):
        st, mo = torch.as_tensor(static[i:i + chunk]), torch.as_tensor(motion_d[i:i + chunk])
        B = st.shape[0]
        for kind, flag in (("static", False), ("motion", True)):
            motion = torch.full((B, T), flag)
            motion[:, 0] = False
            emb = enc(clip_inputs(st, mo, motion))
            single = head.net(torch.cat([emb, emb, torch.full((B, T, 1), np.log1p(1) / 6.0)], -1))
            out[f"emb_{kind}"].append(emb.half().numpy())
            out[f"sal_{kind}"].append((1 - single.softmax(-1)[..., 0]).half().numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


@torch.no_grad()
def belief(head: BeliefHead, cache: dict[str, torch.Tensor], vid: torch.Tensor,
           obs: torch.Tensor) -> torch.Tensor:
    """Class probabilities (B, C) of videos ``vid`` given observed-frame masks ``obs``."""
    mot = motion_mask(obs)
    emb = torch.where(mot[..., None], cache["emb_motion"][vid], cache["emb_static"][vid]).float()
    return head(emb, obs).softmax(-1)
