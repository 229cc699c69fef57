"""The active-viewing environment: temporal atomic operators over a cached video, vectorised
over a batch of (video, trajectory) rows.

State per row: the set of observed frames (a (T,) mask), the focus window of the last dense
look, the explored span, operator calls made and frames viewed. Operators (our reconstruction
of the paper's "local backtracking, temporal expansion, fine-grained sampling"):
- FINE(i): dense window of ``fine_len`` consecutive frames at the i-th initial-scan anchor;
- BACKTRACK(d): a dense window d windows *before* the focus (d = 1, 2, 3);
- ADVANCE(d): a dense window d windows *after* the focus (d = 1, 2, 3);
- EXPAND: double the explored span around the focus with 4 sparse frames;
- ANSWER: stop and answer with the belief's argmax.
Every episode starts with the passive scan: ``n_anchors`` uniform frames. The environment only
ever sees video ids and the perception cache; the spec's event window is not an input.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from components.anompi.perception import BeliefHead, belief, motion_mask

OFFSETS = (1, 2, 3)


def action_names(n_anchors: int) -> list[str]:
    return ([f"fine_{i}" for i in range(n_anchors)] + [f"backtrack_{d}" for d in OFFSETS]
            + [f"advance_{d}" for d in OFFSETS] + ["expand", "answer"])


def anchors(T: int, n: int) -> np.ndarray:
    return ((np.arange(n) + 0.5) * T / n).astype(int)


def uniform_frames(T: int, k: int) -> np.ndarray:
    """The passive sampler's frames: a uniform grid of k frames (cell midpoints)."""
    return np.unique(((np.arange(k) + 0.5) * T / k).astype(int))


def pair_frames(T: int, k: int) -> np.ndarray:
    """The passive pairs sampler: k//2 grid positions, each with its next frame (sees motion)."""
    starts = uniform_frames(T, max(1, k // 2))
    return np.unique(np.clip(np.concatenate([starts, starts + 1]), 0, T - 1))


PASSIVE_SAMPLERS = {"uniform": uniform_frames, "pairs": pair_frames}


@dataclass
class State:
    vid: torch.Tensor        # (B,) video index into the cache
    obs: torch.Tensor        # (B, T) bool
    focus: torch.Tensor      # (B,) start of the last dense window, -1 before the first
    span_lo: torch.Tensor    # (B,) explored span around the focus [lo, hi)
    span_hi: torch.Tensor
    steps: torch.Tensor      # (B,) operator calls made
    done: torch.Tensor       # (B,) bool

    @property
    def frames(self) -> torch.Tensor:
        return self.obs.sum(1)


class ActiveEnv:
    def __init__(self, cache: dict[str, torch.Tensor], head: BeliefHead, policy_cfg):
        self.cache, self.head, self.cfg = cache, head, policy_cfg
        self.T = cache["emb_static"].shape[1]
        self.anchor_t = torch.as_tensor(anchors(self.T, policy_cfg.n_anchors))
        self.names = action_names(policy_cfg.n_anchors)
        self.A = len(self.names)
        self.ANSWER = self.A - 1

    # -- state -------------------------------------------------------------------------------
    def reset(self, vid: torch.Tensor) -> State:
        B = len(vid)
        obs = torch.zeros(B, self.T, dtype=torch.bool)
        obs[:, self.anchor_t] = True
        z = torch.zeros(B, dtype=torch.long)
        return State(vid.long(), obs, z - 1, z.clone(), z.clone(), z.clone(),
                     torch.zeros(B, dtype=torch.bool))

    def belief(self, st: State) -> torch.Tensor:
        return belief(self.head, self.cache, st.vid, st.obs)

    # -- operators ---------------------------------------------------------------------------
    def targets(self, st: State) -> torch.Tensor:
        """Frames each action would acquire: (B, A, 4) long, -1 where none (ANSWER, out of range)."""
        B, L = len(st.vid), self.cfg.fine_len
        width = max(L, 4)
        tg = torch.full((B, self.A, width), -1, dtype=torch.long)
        ar = torch.arange(L)
        for i in range(self.cfg.n_anchors):      # window holding the anchor frame
            start = int(self.anchor_t[i]) - L // 2
            tg[:, i, :L] = start + ar
        has_focus = (st.focus >= 0)[:, None]
        j = self.cfg.n_anchors
        for k, d in enumerate(OFFSETS):
            back = st.focus[:, None] - d * L + ar
            fwd = st.focus[:, None] + d * L + ar
            tg[:, j + k, :L] = torch.where(has_focus, back, -1)
            tg[:, j + len(OFFSETS) + k, :L] = torch.where(has_focus, fwd, -1)
        e = j + 2 * len(OFFSETS)
        gap = ((st.span_hi - st.span_lo) // 2).clamp(min=2)[:, None]
        sparse = torch.cat([st.span_lo[:, None] - 2 * gap, st.span_lo[:, None] - gap,
                            st.span_hi[:, None] - 1 + gap, st.span_hi[:, None] - 1 + 2 * gap], 1)
        tg[:, e, :4] = torch.where(has_focus, sparse, -1)
        tg[(tg < 0) | (tg >= self.T)] = -1
        return tg

    def new_frames(self, st: State, tg: torch.Tensor) -> torch.Tensor:
        """(B, A, 4) bool: target frames not yet observed."""
        seen = torch.gather(st.obs, 1, tg.clamp(min=0).flatten(1)).view_as(tg)
        return (tg >= 0) & ~seen

    def valid(self, st: State, tg: torch.Tensor) -> torch.Tensor:
        n_new = self.new_frames(st, tg).sum(-1)
        ok = (n_new > 0) & ((st.frames[:, None] + n_new) <= self.cfg.budget)
        ok &= (st.steps < self.cfg.max_steps)[:, None]
        ok[st.done] = False
        ok[:, self.ANSWER] = True
        return ok

    def step(self, st: State, action: torch.Tensor, tg: torch.Tensor) -> State:
        """Apply one action per row (rows already done are left unchanged)."""
        act = (~st.done) & (action != self.ANSWER)
        rows = torch.nonzero(act).squeeze(1)
        obs = st.obs.clone()
        if len(rows):
            t = tg[rows, action[rows]]                      # (n, 4)
            r = rows[:, None].expand_as(t)
            keep = t >= 0
            obs[r[keep], t[keep]] = True
        focus, lo, hi = st.focus.clone(), st.span_lo.clone(), st.span_hi.clone()
        j = self.cfg.n_anchors
        dense = act & (action < j + 2 * len(OFFSETS))
        # the window actually acquired: its in-range frames (a BACKTRACK near frame 0 or an
        # ADVANCE near the end is clipped; its first target may be -1, which is not a focus)
        chosen = tg[torch.arange(len(action)), action.clamp(max=self.A - 1)]
        inside = chosen >= 0
        start = torch.where(inside, chosen, self.T).amin(-1)
        end = torch.where(inside, chosen, -1).amax(-1) + 1
        focus = torch.where(dense, start, focus)
        lo = torch.where(dense, start, lo)
        hi = torch.where(dense, end, hi)
        expand = act & (action == j + 2 * len(OFFSETS))
        gap = ((hi - lo) // 2).clamp(min=2)
        lo, hi = torch.where(expand, lo - 2 * gap, lo), torch.where(expand, hi + 2 * gap, hi)
        done = st.done | (action == self.ANSWER)
        return State(st.vid, obs, focus, lo, hi, st.steps + act.long(), done)

    # -- what the policy sees -----------------------------------------------------------------
    def features(self, st: State, tg: torch.Tensor, probs: torch.Tensor):
        """Per-action features (B, A, Fa) and global features (B, Fg) from observed frames only."""
        obs = st.obs.float()
        mot = motion_mask(st.obs).float()
        sal = self.cache["sal_static"][st.vid].float() * obs
        msal = self.cache["sal_motion"][st.vid].float() * mot
        valid_t = tg >= 0
        n_t = valid_t.sum(-1).clamp(min=1)
        centre = ((tg.clamp(min=0) * valid_t).sum(-1) / n_t).long()           # (B, A)
        feats = []
        for r in (4, 8, 16):
            pooled = F.max_pool1d(sal[:, None], 2 * r + 1, 1, r)[:, 0]
            feats.append(torch.gather(pooled, 1, centre))
        pooled = F.max_pool1d(msal[:, None], 17, 1, 8)[:, 0]
        feats.append(torch.gather(pooled, 1, centre))
        explored = F.avg_pool1d(obs[:, None], 17, 1, 8, count_include_pad=False)[:, 0]
        feats.append(torch.gather(explored, 1, centre))
        feats.append(self.new_frames(st, tg).sum(-1).float() / 4)
        kinds = torch.zeros(self.A, 5)
        j = self.cfg.n_anchors
        kinds[:j, 0] = 1
        kinds[j:j + 3, 1] = 1
        kinds[j + 3:j + 6, 2] = 1
        kinds[j + 6, 3] = 1
        kinds[:, 4] = torch.tensor([0.0] * j + [d / 3 for d in OFFSETS] * 2 + [0.0, 0.0])
        B = len(st.vid)
        act = torch.cat([torch.stack(feats, -1), kinds.expand(B, -1, -1)], -1)
        ent = -(probs * probs.clamp(min=1e-8).log()).sum(-1, keepdim=True) / np.log(probs.shape[1])
        glob = torch.cat([probs, ent, st.frames[:, None].float() / self.cfg.budget,
                          st.steps[:, None].float() / self.cfg.max_steps,
                          sal.amax(1, keepdim=True), msal.amax(1, keepdim=True),
                          (st.focus >= 0)[:, None].float()], -1)
        return act, glob


N_ACT_FEATS = 11
N_GLOB_FEATS = 6 + 6
