"""The policy, the scripted warm-start trajectories, rollouts, the AEI utility and iDPO.

The policy scores every operator from features of what was observed so far (saliency and
motion evidence near the operator's target frames, how much of it is new, the operator type)
together with the belief state; ANSWER is scored from the belief state alone. A trajectory's
log-probability sums the policy's own choices only: observations (frames, belief updates) and
forced steps (a single valid action) contribute nothing.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from components.anompi.env import N_ACT_FEATS, N_GLOB_FEATS, ActiveEnv, State
from components.common.multiturn_dpo import dpo_sigmoid_loss


class PolicyNet(nn.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.act = nn.Sequential(nn.Linear(N_ACT_FEATS + N_GLOB_FEATS, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.answer = nn.Sequential(nn.Linear(N_GLOB_FEATS, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, act: torch.Tensor, glob: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """act (..., A, Fa), glob (..., Fg), valid (..., A) -> masked logits (..., A);
        the last action is ANSWER."""
        g = glob[..., None, :].expand(*act.shape[:-1], glob.shape[-1])
        logits = self.act(torch.cat([act, g], -1)).squeeze(-1)
        logits = torch.cat([logits[..., :-1], self.answer(glob)], -1)
        return logits.masked_fill(~valid, -1e9)


def masked_log_probs(logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1).masked_fill(~valid, 0.0)


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp(min=1e-8).log()).sum(-1) / np.log(p.shape[-1])


SCRIPT = ("fine", "backtrack_1", "advance_2")   # then ANSWER


def scripted_action(env: ActiveEnv, st: State, threshold: float) -> torch.Tensor:
    """The warm-start script: after the scan, a local search around the most salient anchor -
    FINE there, BACKTRACK one window, ADVANCE past the first window (12 consecutive frames
    around the anchor) - then ANSWER. Answers at once when no anchor looks salient."""
    sal = env.cache["sal_static"][st.vid][:, env.anchor_t].float()          # anchors are observed
    best = sal.argmax(1)
    answer = torch.full_like(best, env.ANSWER)
    step = st.steps
    act = torch.where(step == 0, best, answer)
    for k, name in enumerate(SCRIPT[1:], start=1):
        act = torch.where(step == k, torch.full_like(best, env.names.index(name)), act)
    silent = (sal.amax(1) < threshold) & (step == 0)
    return torch.where(silent | st.done, answer, act)


@torch.no_grad()
def run_episodes(env: ActiveEnv, vid: torch.Tensor, policy: PolicyNet | None = None, *,
                 mode: str = "greedy", temperature: float = 1.0, epsilon: float = 0.0,
                 generator: torch.Generator | None = None, script_threshold: float = 0.5,
                 actions: torch.Tensor | None = None, keep_features: bool = False) -> dict:
    """Run episodes for ``vid`` rows. mode: greedy | sample | script | replay (``actions``).
    Returns actions (B, K+1; -1 after the end), frames, steps, final probs, per-step clipped
    entropy reductions, the final observation mask and (optionally) the features seen."""
    K = env.cfg.max_steps
    st = env.reset(vid)
    B = len(vid)
    out_actions = torch.full((B, K + 1), -1, dtype=torch.long)
    probs = env.belief(st)
    h0 = _entropy(probs)
    gains = torch.zeros(B)
    feats = []
    for k in range(K + 1):
        if bool(st.done.all()):
            break
        tg = env.targets(st)
        valid = env.valid(st, tg)
        if mode == "script":
            a = scripted_action(env, st, script_threshold)
            a = torch.where(valid.gather(1, a[:, None])[:, 0], a, torch.full_like(a, env.ANSWER))
        elif mode == "replay":
            a = actions[:, k].clamp(min=0)
        else:
            act_f, glob = env.features(st, tg, probs)
            logits = policy(act_f, glob, valid)
            if mode == "greedy":
                a = logits.argmax(-1)
            else:
                p = torch.softmax(logits / temperature, -1)
                u = valid.float() / valid.float().sum(-1, keepdim=True)
                p = (1 - epsilon) * p + epsilon * u
                a = torch.multinomial(p, 1, generator=generator)[:, 0]
        if keep_features:
            act_f, glob = env.features(st, tg, probs)
            feats.append((act_f, glob, valid))
        a = torch.where(st.done, torch.full_like(a, env.ANSWER), a)
        out_actions[:, k] = torch.where(st.done, torch.full_like(a, -1), a)
        h_prev = _entropy(probs)
        st = env.step(st, a, tg)
        probs = env.belief(st)
        gains += (h_prev - _entropy(probs)).clamp(min=0) * (out_actions[:, k] >= 0) \
            * (out_actions[:, k] != env.ANSWER)
    res = {"actions": out_actions, "frames": st.frames, "steps": st.steps, "probs": probs,
           "pred": probs.argmax(-1), "info_gain": gains, "h0": h0, "obs": st.obs}
    if keep_features:
        res["features"] = feats
    return res


def stack_features(env: ActiveEnv, feats: list, actions: torch.Tensor):
    """Pad per-step features to (B, K+1, ...) and the mask of steps the policy chose."""
    K1 = actions.shape[1]
    B = actions.shape[0]
    act = torch.zeros(B, K1, env.A, N_ACT_FEATS)
    glob = torch.zeros(B, K1, N_GLOB_FEATS)
    valid = torch.zeros(B, K1, env.A, dtype=torch.bool)
    valid[..., env.ANSWER] = True
    for k, (a, g, v) in enumerate(feats):
        act[:, k], glob[:, k], valid[:, k] = a, g, v
    chosen = (actions >= 0) & (valid.sum(-1) > 1)        # forced steps carry no choice
    return act, glob, valid, chosen


def trajectory_logp(policy: PolicyNet, act, glob, valid, actions, chosen) -> torch.Tensor:
    """Sum over the policy's own choices of log pi(a_k | s_k): (B,)."""
    logp = masked_log_probs(policy(act, glob, valid), valid)
    picked = logp.gather(-1, actions.clamp(min=0)[..., None])[..., 0]
    return (picked * chosen).sum(-1)


def aei_utility(correct, info_gain, frames, n_init: int, budget: int,
                lambda_info: float, lambda_cost: float):
    """Active Evidence Inquiry utility (reconstructed): task success + lambda_info x belief
    entropy reduction (per-step, clipped at 0, in units of log C) - lambda_cost x frames acquired
    beyond the initial scan / budget. Only the video-level label enters (through ``correct``)."""
    return (np.asarray(correct, float) + lambda_info * np.asarray(info_gain, float)
            - lambda_cost * (np.asarray(frames, float) - n_init) / budget)


PAIR_KINDS = ("outcome", "cost")


def _outcome_pairs(rows, correct, frames, utility, n_max: int, margin: float) -> list:
    """Correct over wrong rollouts of one video, each wrong one matched by the nearest number of
    frames viewed (used once), so the pair differs in success and hardly in cost."""
    wins = [r for r in rows[np.argsort(-utility[rows], kind="stable")] if correct[r]]
    losers = [r for r in rows if not correct[r]]
    pairs = []
    for w in wins[:n_max]:
        if not losers:
            break
        j = int(np.argmin([abs(frames[w] - frames[l]) for l in losers]))
        l = losers.pop(j)
        if utility[w] - utility[l] > margin:
            pairs.append((int(w), int(l), "outcome"))
    return pairs


def _cost_pairs(rows, correct, utility, groups, margin: float) -> list:
    """Within each success group: highest over lowest utility (equal success, so the pair is
    decided by cost and evidence)."""
    pairs = []
    for group in groups:
        members = rows[correct[rows] == (group == "correct")]
        if len(members) < 2:
            continue
        u = utility[members]
        w, l = members[int(np.argmax(u))], members[int(np.argmin(u))]
        if utility[w] - utility[l] > margin:
            pairs.append((int(w), int(l), "cost"))
    return pairs


def preference_pairs(video: np.ndarray, utility: np.ndarray, correct: np.ndarray, frames: np.ndarray,
                     margin: float, outcome_pairs: int = 2,
                     cost_groups=("correct",)) -> list[tuple[int, int, str]]:
    """The pre-registered pairing rule (CLAIMS.md): per video, up to ``outcome_pairs`` pairs of
    a correct over a wrong rollout at the nearest frame count, plus one pair per success group
    in ``cost_groups`` (best over worst AEI utility). The winner always has the higher utility,
    by more than ``margin``. Returns (winner row, loser row, kind)."""
    correct = np.asarray(correct).astype(bool)
    pairs = []
    order = np.argsort(video, kind="stable")
    bounds = np.flatnonzero(np.diff(video[order])) + 1
    for rows in np.split(order, bounds):
        pairs += _outcome_pairs(rows, correct, frames, utility, outcome_pairs, margin)
        pairs += _cost_pairs(rows, correct, utility, cost_groups, margin)
    return pairs


# iDPO's loss is the shared sigmoid DPO loss, -log sigmoid(beta [(log pi - log ref)(tau_w) -
# (log pi - log ref)(tau_l)]), mean over pairs; the paper profile trains through the same module.
dpo_loss = dpo_sigmoid_loss
