"""Policy stages: the warm start (sft_policy), round-1 rollouts, preference pairs and iDPO."""
from __future__ import annotations

import copy

import numpy as np
import torch

from components.anompi.data import labels_only, load_specs
from components.anompi.env import ActiveEnv
from components.anompi.policy import (PAIR_KINDS, PolicyNet, aei_utility, dpo_loss, masked_log_probs,
                                      preference_pairs, run_episodes, stack_features,
                                      trajectory_logp)
from components.anompi.pretrain import load_cache, load_head
from components.anompi import paper_stages
from components.common.io import load_torch, read_table, save_torch, write_table
from components.common.seeds import seed_everything
from components.common.train import fit


def make_env(perception_dir, policy_cfg, split: str = "train") -> ActiveEnv:
    return ActiveEnv(load_cache(perception_dir, split), load_head(perception_dir), policy_cfg)


def load_policy(folder, hidden: int) -> PolicyNet:
    policy = PolicyNet(hidden)
    policy.load_state_dict(load_torch(folder / "policy.pt"))
    return policy.eval()


def variant_weights(variant: str, idpo) -> tuple[float, float]:
    """(lambda_info, lambda_cost) of an AEI ablation."""
    if variant == "full":
        return idpo.lambda_info, idpo.lambda_cost
    if variant == "no_info":
        return 0.0, idpo.lambda_cost
    if variant == "no_cost":
        return idpo.lambda_info, 0.0
    if variant == "outcome_only":
        return 0.0, 0.0
    raise ValueError(f"unknown iDPO variant {variant!r} (full, no_info, no_cost, outcome_only)")


def replay(env: ActiveEnv, vid: torch.Tensor, actions: torch.Tensor, chunk: int = 4096):
    """Features of recorded trajectories (deterministic environment => exact replay)."""
    parts = []
    for i in range(0, len(vid), chunk):
        res = run_episodes(env, vid[i:i + chunk], mode="replay", actions=actions[i:i + chunk],
                           keep_features=True)
        parts.append(stack_features(env, res["features"], actions[i:i + chunk]))
    return tuple(torch.cat(p) for p in zip(*parts))


# -- warm start ----------------------------------------------------------------------------------
def sft_policy_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:                     # the video-LLM branch (paper_stages.py)
        return paper_stages.sft_policy(cfg, ctx)
    seed = int(ctx.item["seed"])
    seed_everything(seed)
    pdir = ctx.inputs["pretrain_perception"]
    env = make_env(pdir, cfg.policy)
    n = env.cache["emb_static"].shape[0]
    vid = torch.arange(n)
    script = run_episodes(env, vid, mode="script", script_threshold=cfg.sft.saliency_threshold)
    act, glob, valid, chosen = replay(env, vid, script["actions"])
    sel = chosen.nonzero(as_tuple=True)
    X = (act[sel], glob[sel], valid[sel], script["actions"][sel])
    policy = PolicyNet(cfg.policy.hidden)
    rng = np.random.default_rng(seed)
    ls = cfg.sft.label_smoothing

    def batches():
        while True:
            idx = torch.as_tensor(rng.integers(0, len(X[0]), cfg.sft.batch))
            yield tuple(x[idx] for x in X)

    def loss_fn(model, batch):
        a, g, v, y = batch
        logp = masked_log_probs(model(a, g, v), v)
        target = torch.nn.functional.one_hot(y, v.shape[-1]).float()
        target = (1 - ls) * target + ls * v.float() / v.float().sum(-1, keepdim=True)
        return -(target * logp).sum(-1).mean()

    records = fit(policy, batches(), loss_fn, steps=cfg.sft.steps, lr=cfg.sft.lr, ctx=ctx,
                  log_every=max(1, cfg.sft.steps // 20), prefix="sft")
    with torch.no_grad():
        agree = (policy(X[0], X[1], X[2]).argmax(-1) == X[3]).float().mean().item()
        greedy = run_episodes(env, vid, policy.eval())
    y = labels_only(load_specs(ctx.inputs["build_env"] / "train.parquet"))
    save_torch(ctx.out_dir / "policy.pt", policy.state_dict())
    ctx.write_metrics({"final_loss": records[-1]["sft/loss"], "agreement_with_script": agree,
                       "script_train_acc": float((script["pred"].numpy() == y).mean()),
                       "train_acc": float((greedy["pred"].numpy() == y).mean()),
                       "train_frames": float(greedy["frames"].float().mean())})


# -- rollouts and preferences -------------------------------------------------------------------
def sample_rollouts(env: ActiveEnv, policy: PolicyNet, labels: np.ndarray, rcfg, seed: int) -> dict:
    """M sampled trajectories for each of ``n_videos`` random training videos."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    videos = rng.choice(n, size=min(rcfg.n_videos, n), replace=False)
    vid = torch.as_tensor(np.repeat(videos, rcfg.per_video))
    gen = torch.Generator().manual_seed(seed)
    cols: dict[str, list] = {k: [] for k in ("actions", "frames", "steps", "pred", "info_gain")}
    for i in range(0, len(vid), rcfg.batch):
        res = run_episodes(env, vid[i:i + rcfg.batch], policy, mode="sample",
                           temperature=rcfg.temperature, epsilon=rcfg.epsilon, generator=gen)
        for k in cols:
            cols[k].append(res[k])
    out = {k: torch.cat(v).numpy() for k, v in cols.items()}
    out["video"] = vid.numpy()
    out["label"] = labels[out["video"]]
    out["correct"] = (out["pred"] == out["label"]).astype(np.float64)
    return out


def rollouts_table(ro: dict) -> dict:
    return {"video": ro["video"], "label": ro["label"], "actions": [list(map(int, a)) for a in ro["actions"]],
            "frames": ro["frames"], "steps": ro["steps"], "pred": ro["pred"],
            "correct": ro["correct"], "info_gain": ro["info_gain"]}


def rollouts_from_table(table) -> dict:
    d = {c: np.array(table.column(c).to_pylist()) if c == "actions"
         else table.column(c).to_numpy(zero_copy_only=False).copy() for c in table.column_names}
    d["actions"] = np.stack([np.asarray(a, dtype=np.int64) for a in d["actions"]])
    return d


def rollout_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:                     # the video-LLM branch (paper_stages.py)
        return paper_stages.rollout(cfg, ctx)
    seed = int(ctx.item["seed"])
    seed_everything(seed)
    env = make_env(ctx.inputs["pretrain_perception"], cfg.policy)
    policy = load_policy(ctx.inputs["sft_policy"][str(seed)], cfg.policy.hidden)
    labels = labels_only(load_specs(ctx.inputs["build_env"] / "train.parquet"))
    ro = sample_rollouts(env, policy, labels, cfg.rollout, seed=1000 + seed)
    write_table(ctx.out_dir / "trajectories.parquet", rollouts_table(ro))
    ctx.write_metrics({"n_trajectories": len(ro["video"]), "accuracy": float(ro["correct"].mean()),
                       "frames": float(ro["frames"].mean()), "steps": float(ro["steps"].mean())})


def pairs_from_rollouts(ro: dict, variant: str, cfg) -> tuple[list[tuple[int, int, str]], np.ndarray]:
    li, lc = variant_weights(variant, cfg.idpo)
    u = aei_utility(ro["correct"], ro["info_gain"], ro["frames"], cfg.policy.n_anchors,
                    cfg.policy.budget, li, lc)
    pairs = preference_pairs(ro["video"], u, ro["correct"], ro["frames"], cfg.idpo.margin,
                             cfg.idpo.outcome_pairs, cfg.idpo.cost_groups)
    return pairs, u


def pair_metrics(ro: dict, pairs, u: np.ndarray) -> dict:
    """How the pairs split into kinds and what separates winners from losers."""
    out = {"n_pairs": len(pairs)}
    for kind in PAIR_KINDS:
        sel = [(w, l) for w, l, k in pairs if k == kind]
        out[f"n_{kind}_pairs"] = len(sel)
        if sel:
            w, l = np.array(sel).T
            out[f"{kind}_winner_frames"] = float(ro["frames"][w].mean())
            out[f"{kind}_loser_frames"] = float(ro["frames"][l].mean())
            out[f"{kind}_mean_margin"] = float((u[w] - u[l]).mean())
            out[f"{kind}_winner_correct"] = float(ro["correct"][w].mean())
    return out


def build_preferences_stage(cfg, ctx) -> None:
    variant, seed = ctx.item["variant"], int(ctx.item["seed"])
    ro = rollouts_from_table(read_table(ctx.inputs["rollout"][str(seed)] / "trajectories.parquet"))
    pairs, u = pairs_from_rollouts(ro, variant, cfg)
    w = np.array([p[0] for p in pairs], dtype=np.int64)
    l_ = np.array([p[1] for p in pairs], dtype=np.int64)
    write_table(ctx.out_dir / "pairs.parquet", {"video": ro["video"][w], "winner": w, "loser": l_,
                                               "kind": [p[2] for p in pairs],
                                               "u_winner": u[w], "u_loser": u[l_]})
    ctx.write_metrics(pair_metrics(ro, pairs, u))


# -- iDPO ---------------------------------------------------------------------------------------
def idpo_round(policy: PolicyNet, env: ActiveEnv, ro: dict, pairs, cfg, rng, ctx, prefix: str) -> dict:
    """One iDPO update on trajectory pairs; the reference is the policy before this round."""
    if not pairs:
        return {f"{prefix}/n_pairs": 0}
    ref = copy.deepcopy(policy).eval()
    w = np.array([p[0] for p in pairs])
    l_ = np.array([p[1] for p in pairs])
    n_outcome = sum(p[2] == "outcome" for p in pairs)
    acts = torch.as_tensor(ro["actions"])
    vid = torch.as_tensor(ro["video"])
    fw = replay(env, vid[w], acts[w])
    fl = replay(env, vid[l_], acts[l_])
    aw, al = acts[w], acts[l_]
    with torch.no_grad():
        ref_w = trajectory_logp(ref, *fw[:3], aw, fw[3])
        ref_l = trajectory_logp(ref, *fl[:3], al, fl[3])
    n = len(w)
    bs = min(cfg.idpo.batch, n)
    steps = max(1, cfg.idpo.epochs * int(np.ceil(n / bs)))

    def batches():
        while True:
            perm = torch.as_tensor(rng.permutation(n))
            for i in range(0, n - bs + 1, bs):
                yield perm[i:i + bs]

    def loss_fn(model, idx):
        pw = trajectory_logp(model, *(f[idx] for f in fw[:3]), aw[idx], fw[3][idx])
        pl = trajectory_logp(model, *(f[idx] for f in fl[:3]), al[idx], fl[3][idx])
        return dpo_loss(pw, pl, ref_w[idx], ref_l[idx], cfg.idpo.beta)

    records = fit(policy, batches(), loss_fn, steps=steps, lr=cfg.idpo.lr, ctx=ctx,
                  log_every=max(1, steps // 10), prefix=prefix)
    with torch.no_grad():
        margin = (trajectory_logp(policy, *fw[:3], aw, fw[3]) - ref_w) \
            - (trajectory_logp(policy, *fl[:3], al, fl[3]) - ref_l)
    return {f"{prefix}/n_pairs": n, f"{prefix}/n_outcome_pairs": n_outcome,
            f"{prefix}/final_loss": records[-1][f"{prefix}/loss"],
            f"{prefix}/reward_accuracy": float((margin > 0).float().mean())}


def train_idpo_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:                     # the video-LLM branch (paper_stages.py)
        return paper_stages.train_idpo(cfg, ctx)
    variant, seed = ctx.item["variant"], int(ctx.item["seed"])
    seed_everything(seed)
    rng = np.random.default_rng(seed)
    env = make_env(ctx.inputs["pretrain_perception"], cfg.policy)
    labels = labels_only(load_specs(ctx.inputs["build_env"] / "train.parquet"))
    policy = load_policy(ctx.inputs["sft_policy"][str(seed)], cfg.policy.hidden)
    ro = rollouts_from_table(read_table(ctx.inputs["rollout"][str(seed)] / "trajectories.parquet"))
    pt = read_table(ctx.inputs["build_preferences"][f"{variant}-{seed}"] / "pairs.parquet")
    pairs = list(zip(pt.column("winner").to_pylist(), pt.column("loser").to_pylist(),
                     pt.column("kind").to_pylist()))
    metrics: dict = {}
    for r in range(1, cfg.idpo.rounds + 1):
        if r > 1:                               # on-policy re-sampling from the current policy
            ro = sample_rollouts(env, policy.eval(), labels, cfg.rollout, seed=1000 * r + seed)
            pairs, _ = pairs_from_rollouts(ro, variant, cfg)
        metrics.update({f"round{r}/rollout_acc": float(ro["correct"].mean()),
                        f"round{r}/rollout_frames": float(ro["frames"].mean()),
                        f"round{r}/rollout_steps": float(ro["steps"].mean())})
        metrics.update(idpo_round(policy, env, ro, pairs, cfg, rng, ctx, prefix=f"round{r}"))
        policy.eval()
        ctx.progress(r, cfg.idpo.rounds, f"iDPO round {r}")
    with torch.no_grad():
        greedy = run_episodes(env, torch.arange(len(labels)), policy)
    metrics.update({"train_acc": float((greedy["pred"].numpy() == labels).mean()),
                    "train_frames": float(greedy["frames"].float().mean()),
                    "train_steps": float(greedy["steps"].float().mean())})
    save_torch(ctx.out_dir / "policy.pt", policy.state_dict())
    ctx.write_metrics(metrics)
