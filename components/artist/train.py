"""SFT traces, supervised fine-tuning, hierarchical RL, and the static baselines."""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F

from components.artist.policy import (TaskSet, forward_state, load_tasks, make_policy, oracle_accuracy,
                                      rollout, sample_answers)
from components.artist.rewards import (controller_reward, global_normalise,
                                       reasoner_reward, trajectory_format, variance_guided_choice)
from components.artist.tasks import BURST_LEN
from components.artist.views import action_windows, candidate_actions, coarse_candidate_precision
from components.common.io import load_torch, read_table, save_torch, write_json_atomic, write_table
from components.common.rl import group_advantages
from components.common.seeds import seed_everything
from components.common.train import fit

ADV_EPS = 1e-4   # the std guard this method's committed runs used (common's default is 1e-6)


# ---------------------------------------------------------------- traces
def synthesise_trace(evidence: list, decoys: list, length: int, n_fine: int, max_zooms: int,
                     detour_prob: float, rng: np.random.Generator) -> list[int]:
    """Every candidate window (the real events and the look-alike decoys) in random order, so the
    set of windows visited never gives the answer away: only what the zoomed views show does.
    With ``detour_prob`` one random non-candidate window is inserted at a random place when there
    is room. Global-evidence families get one random window; the short family none (STOP at once)."""
    actions = candidate_actions(evidence, decoys, length, n_fine)
    rng.shuffle(actions)
    zoomable = length > 2 * n_fine * 2
    if not actions and any(e - s >= length // 2 for s, e in evidence) and zoomable:
        actions = [int(rng.integers(n_fine))]
    if rng.random() < detour_prob and zoomable and len(actions) < max_zooms:
        pool = [w for w in range(n_fine) if w not in actions]
        actions.insert(int(rng.integers(len(actions) + 1)), int(rng.choice(pool)))
    return [int(a) for a in actions[:max_zooms]]


def geometry_determined_share(families: list[str], evidence: list, decoys: list, lengths, n_fine: int,
                              n_quarters: int) -> float:
    """Share of localisation examples whose candidate windows all lie in one quarter, i.e. whose
    answer the geometry of the visited windows alone would give away (0 by construction)."""
    rows = [i for i, f in enumerate(families) if f == "localize"]
    if not rows:
        return float("nan")
    per_quarter = n_fine // n_quarters
    hits = [len({w // per_quarter for w in candidate_actions(evidence[i], decoys[i], int(lengths[i]), n_fine)})
            == 1 for i in rows]
    return float(np.mean(hits))


def coarse_localisation(tasks: TaskSet, views_cfg, bump_len: int) -> dict:
    """Premise: the coarse view alone points at the candidate windows (matched filter, no training),
    on the families with candidate bumps; with chance (k / n_fine) beside it."""
    prec, chance = [], []
    for i, fam in enumerate(tasks.family):
        if fam not in ("localize", "count"):
            continue
        n = int(tasks.length[i])
        cands = candidate_actions(tasks.evidence[i], tasks.decoys[i], n, views_cfg.n_fine)
        coarse = tasks.views[i, 0].numpy()
        prec.append(coarse_candidate_precision(coarse, cands, views_cfg.n_fine, bump_len * views_cfg.budget / n))
        chance.append(len(cands) / views_cfg.n_fine)
    if not prec:
        return {}
    return {"val_coarse_candidate_precision": float(np.mean(prec)), "val_coarse_chance": float(np.mean(chance))}


def build_sft_traces_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:
        return paper_traces(cfg, ctx)
    t = read_table(ctx.inputs["generate_tasks"] / "train.parquet").select(
        ["length", "evidence", "decoys", "family"]).to_pydict()
    v = cfg.views
    rng = np.random.default_rng(cfg.traces.seed)
    traces = [synthesise_trace(e, d, n, v.n_fine, v.max_zooms, cfg.traces.detour_prob, rng)
              for e, d, n in zip(t["evidence"], t["decoys"], t["length"])]
    columns = {"example": list(range(len(traces))), "actions": traces, "family": t["family"]}
    if cfg.lm.enabled:   # the same traces as text-protocol windows for the LM policy
        from components.artist.lm_stages import lm_trace_windows

        columns["windows"] = lm_trace_windows(cfg, t, traces)
    write_table(ctx.out_dir / "sft_traces.parquet", columns)
    val = load_tasks(ctx.inputs["generate_tasks"] / "val.parquet", v)
    premise = {"geometry_determined_share": geometry_determined_share(
        t["family"], t["evidence"], t["decoys"], t["length"], v.n_fine, v.n_quarters),
        **coarse_localisation(val, v, BURST_LEN)}
    write_json_atomic(ctx.out_dir / "premise.json", premise)
    ctx.write_metrics({"n_traces": len(traces), "mean_zooms": float(np.mean([len(a) for a in traces])),
                       **premise})


def paper_traces(cfg, ctx) -> None:
    """The paper's SFT traces: the zoom calls of each training question's curated conversation
    (``cot_in_format``); a question without one is answered after the overview alone."""
    from components.artist.lm_stages import lm_trace_windows

    t = read_table(ctx.inputs["generate_tasks"] / "train.parquet").select(["family", "cot_windows"]).to_pydict()
    windows = lm_trace_windows(cfg, t, None)
    write_table(ctx.out_dir / "sft_traces.parquet", {"example": list(range(len(windows))), "windows": windows,
                                                      "family": t["family"]})
    write_json_atomic(ctx.out_dir / "premise.json", {})
    ctx.write_metrics({"n_traces": len(windows), "mean_zooms": float(np.mean([len(w) for w in windows])),
                       "share_with_zooms": float(np.mean([len(w) > 0 for w in windows]))})


# ---------------------------------------------------------------- SFT
def trace_rows(traces: list[list[int]], n_actions: int, max_zooms: int, final_w: float, mid_w: float):
    """One supervised row per round of each trace: (example, prefix, controller target, answer weight)."""
    ex, prefix, target, weight = [], [], [], []
    for i, acts in enumerate(traces):
        for t in range(len(acts) + 1):
            p = list(acts[:t]) + [-1] * (max_zooms - t)
            ex.append(i)
            prefix.append(p)
            target.append(acts[t] if t < len(acts) else n_actions)
            weight.append(final_w if t == len(acts) else mid_w)
    return (torch.tensor(ex), torch.tensor(prefix, dtype=torch.long), torch.tensor(target),
            torch.tensor(weight, dtype=torch.float32))


def sft_stage(cfg, ctx) -> None:
    if cfg.lm.enabled:
        from components.artist.lm_stages import lm_sft_stage

        return lm_sft_stage(cfg, ctx)
    seed = ctx.item["seed"]
    seed_everything(seed)
    tasks = load_tasks(ctx.inputs["generate_tasks"] / "train.parquet", cfg.views)
    traces = read_table(ctx.inputs["build_sft_traces"] / "sft_traces.parquet").to_pydict()["actions"]
    model = make_policy(cfg.model, cfg.views)
    ex, prefix, target, weight = trace_rows(traces, model.n_actions, cfg.views.max_zooms,
                                            cfg.sft.answer_weight, cfg.sft.intermediate_answer_weight)
    n, bs = len(ex), cfg.sft.batch_size
    steps = cfg.sft.epochs * math.ceil(n / bs)
    gen = torch.Generator().manual_seed(seed)

    def batches():
        while True:
            perm = torch.randperm(n, generator=gen)
            for k in range(0, n - bs + 1, bs):
                yield perm[k:k + bs]

    def loss_fn(m, rows):
        ctrl, ans = forward_state(m, tasks, ex[rows], prefix[rows])
        lc = F.cross_entropy(ctrl, target[rows])
        la = (F.cross_entropy(ans, tasks.answer[ex[rows]], reduction="none") * weight[rows]).mean()
        return cfg.sft.controller_weight * lc + la

    records = fit(model, batches(), loss_fn, steps=steps, lr=cfg.sft.lr, weight_decay=cfg.sft.weight_decay,
                  warmup=min(50, steps // 10), ctx=ctx, log_every=20, prefix="sft")
    save_torch(ctx.out_dir / "policy.pt", model.state_dict())
    val = load_tasks(ctx.inputs["generate_tasks"] / "val.parquet", cfg.views)
    oracle = oracle_accuracy(model, val, cfg.views.n_fine, cfg.views.max_zooms)
    premise = {f"val_oracle_acc_{f}": acc for f, acc in oracle.items()}
    premise["val_oracle_acc_min"] = min(oracle.values())
    write_json_atomic(ctx.out_dir / "premise.json", premise)
    ctx.write_metrics({"final_loss": records[-1]["sft/loss"], "steps": steps, "rows": n, **premise})


# ---------------------------------------------------------------- hierarchical RL
def controller_states(chosen: torch.Tensor, n_actions: int, max_zooms: int):
    """Every decision a trajectory made: (trajectory, prefix before it, action taken)."""
    traj, prefix, action = [], [], []
    rounds = (chosen >= 0).sum(dim=1).tolist()
    for j, r_j in enumerate(rounds):
        for r in range(r_j + (1 if r_j < max_zooms else 0)):
            p = chosen[j].clone()
            p[r:] = -1
            traj.append(j)
            prefix.append(p)
            action.append(int(chosen[j, r]) if r < r_j else n_actions)
    return torch.tensor(traj), torch.stack(prefix), torch.tensor(action)


def masked_kl(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the valid options (masked entries are -inf in both)."""
    valid = torch.isfinite(logits) & torch.isfinite(ref_logits)
    # finite stand-ins for masked entries: -inf - -inf would poison the gradient with NaN
    logp = F.log_softmax(logits.masked_fill(~valid, -1e4), dim=1)
    logq = F.log_softmax(ref_logits.masked_fill(~valid, -1e4), dim=1)
    return (logp.exp() * (logp - logq)).masked_fill(~valid, 0.0).sum(dim=1)


def explore_anneal_steps(rl) -> int:
    """Iterations over which the exploration bonus decays to 0: a fraction of this run's iterations
    (the paper's 300 steps are longer than our whole run, so its bonus would never anneal here)."""
    return max(1, int(round(rl.explore_anneal_fraction * rl.iterations)))


def rl_step(model, ref, tasks: TaskSet, rl, views, step: int, rng: np.random.Generator,
            gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    """One iteration of hierarchical policy optimisation; returns the loss and its statistics."""
    max_zooms = views.max_zooms
    q, k, n = rl.questions, rl.controller_rollouts, rl.reasoner_rollouts
    idx_q = torch.from_numpy(rng.choice(len(tasks), size=q, replace=False))
    idx = idx_q.repeat_interleave(k)
    model.eval()
    chosen, final = rollout(model, tasks, idx, max_zooms, rl.controller_temperature, gen)
    answers = sample_answers(final, rl.reasoner_temperature, n, gen)          # (qk, n)
    correct = (answers == tasks.answer[idx][:, None]).float()
    consistency = correct.mean(dim=1)
    rounds = (chosen >= 0).sum(dim=1)
    rewards = []
    for j in range(len(idx)):
        length = int(tasks.length[idx[j]])
        wins = action_windows(length, views.n_fine, views.n_quarters)
        acts = [int(a) for a in chosen[j] if a >= 0]
        fmt, err = trajectory_format([tuple(wins[a]) for a in acts], length)
        rewards.append(controller_reward(
            float(consistency[j]), int(rounds[j]), fmt, err, len(set(acts)), step,
            w_consistency=rl.w_consistency, round_penalty=rl.round_penalty, w_format=rl.w_format,
            error_reward=rl.format_error_reward, w_explore=rl.w_explore, anneal=explore_anneal_steps(rl),
            lo=rl.explore_min_segments, hi=rl.explore_max_segments))
    rewards = torch.tensor(rewards, dtype=torch.float32)
    adv_c = global_normalise(group_advantages(rewards.view(q, k), rl.advantage, ADV_EPS)).flatten()

    model.train()
    # controller: trajectory-level credit on every decision of the trajectory (batch-normalised)
    traj, prefix, action = controller_states(chosen, model.n_actions, max_zooms)
    ctrl, _ = forward_state(model, tasks, idx[traj], prefix)
    logp = F.log_softmax(ctrl / rl.controller_temperature, dim=1).gather(1, action[:, None])[:, 0]
    loss_c = -(adv_c[traj] * logp).sum() / len(traj)

    # reasoner: one controller trajectory per question, chosen by the variance of its group
    r_rewards = torch.from_numpy(reasoner_reward(correct.numpy(), 1.0, rl.w_accuracy, rl.w_format)).float()
    pick = torch.tensor([qi * k + variance_guided_choice(r_rewards[qi * k:(qi + 1) * k].numpy(),
                                                         rl.variance_temperature, rl.variance_eps, rng)
                         for qi in range(q)])
    adv_r = group_advantages(r_rewards[pick], "grpo", ADV_EPS)                            # (q, n)
    _, ans = forward_state(model, tasks, idx[pick], chosen[pick])
    logp_r = F.log_softmax(ans / rl.reasoner_temperature, dim=1).gather(1, answers[pick])
    with torch.no_grad():
        _, ref_ans = forward_state(ref, tasks, idx[pick], chosen[pick])
    kl = masked_kl(ans, ref_ans).mean()
    loss_r = -(adv_r * logp_r).mean() + rl.kl_beta * kl
    stats = {"reward": float(rewards.mean()), "consistency": float(consistency.mean()),
             "explore_weight": rl.w_explore * max(0.0, 1.0 - step / explore_anneal_steps(rl)),
             "rounds": float(rounds.float().mean()), "kl": float(kl.detach()),
             "informative_groups": float((r_rewards[pick].std(dim=1) > 0).float().mean())}
    return loss_c + loss_r, stats


def rl_stage(cfg, ctx) -> None:
    if cfg.lm.enabled:
        from components.artist.lm_stages import lm_rl_stage

        return lm_rl_stage(cfg, ctx)
    seed = ctx.item["seed"]
    seed_everything(seed)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    tasks = load_tasks(ctx.inputs["generate_tasks"] / "train.parquet", cfg.views)
    model = make_policy(cfg.model, cfg.views)
    model.load_state_dict(load_torch(ctx.inputs["sft"] / "policy.pt"))   # this seed's item (item_deps)
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    rl = cfg.rl
    opt = torch.optim.AdamW(model.parameters(), lr=rl.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, rl.warmup)) * max(0.0, 1.0 - s / rl.iterations))
    history = []
    for it in range(rl.iterations):
        loss, stats = rl_step(model, ref, tasks, rl, cfg.views, it, rng, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), rl.grad_clip)
        opt.step()
        sched.step()
        history.append(stats)
        if (it + 1) % 10 == 0 or it + 1 == rl.iterations:
            window = {key: float(np.mean([h[key] for h in history[-10:]])) for key in stats}
            ctx.log_metrics({f"rl/{key}": v for key, v in window.items()}, step=it + 1)
            ctx.progress(it + 1, rl.iterations, f"reward {window['reward']:.3f} rounds {window['rounds']:.2f}")
    model.eval()
    save_torch(ctx.out_dir / "policy.pt", model.state_dict())
    last = {key: float(np.mean([h[key] for h in history[-20:]])) for key in history[-1]}
    first = {key: float(np.mean([h[key] for h in history[:20]])) for key in history[0]}
    ctx.write_metrics({**{f"last_{k}": v for k, v in last.items()}, **{f"first_{k}": v for k, v in first.items()},
                       "final_explore_weight": history[-1]["explore_weight"]})


# ---------------------------------------------------------------- static baselines
def static_budget(variant: str, views_cfg) -> int:
    if variant == "static":
        return views_cfg.budget
    if variant == "static_total":
        return views_cfg.budget * (1 + views_cfg.max_zooms)
    raise ValueError(f"unknown static variant {variant!r} (static, static_total)")


@torch.no_grad()
def greedy_accuracy(model, tasks: TaskSet) -> float:
    model.eval()
    empty = torch.full((len(tasks), 0), -1, dtype=torch.long)
    hits = 0
    for k in range(0, len(tasks), 256):
        idx = torch.arange(k, min(len(tasks), k + 256))
        _, ans = forward_state(model, tasks, idx, empty[idx])
        hits += int((ans.argmax(1) == tasks.answer[idx]).sum())
    return hits / len(tasks)


def train_static_stage(cfg, ctx) -> None:
    if cfg.lm.enabled:   # the LM's baselines are other models in the paper; its overview-only
        ctx.write_metrics({"skipped_for_lm_policy": 1.0})   # reasoner is scored in evaluate
        return
    variant, seed = ctx.item["variant"], ctx.item["seed"]
    seed_everything(seed)
    budget = static_budget(variant, cfg.views)
    data = ctx.inputs["generate_tasks"]
    train = load_tasks(data / "train.parquet", cfg.views, budget=budget, coarse_only=True)
    val = load_tasks(data / "val.parquet", cfg.views, budget=budget, coarse_only=True)
    model = make_policy(cfg.model, cfg.views, budget=budget, max_views=1)
    bs = cfg.sft.batch_size
    per_epoch = math.ceil(len(train) / bs)
    gen = torch.Generator().manual_seed(seed)
    best, best_acc, curve = copy.deepcopy(model.state_dict()), -1.0, []
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft.lr, weight_decay=cfg.sft.weight_decay)
    for epoch in range(cfg.baselines.static_epochs):
        def batches():
            perm = torch.randperm(len(train), generator=gen)
            while True:
                for k in range(0, len(train) - bs + 1, bs):
                    yield perm[k:k + bs]

        def loss_fn(m, idx):
            _, ans = forward_state(m, train, idx, torch.full((len(idx), 0), -1, dtype=torch.long))
            return F.cross_entropy(ans, train.answer[idx])

        fit(model, batches(), loss_fn, steps=per_epoch, optimizer=opt, schedule="constant", ctx=None)
        acc = greedy_accuracy(model, val)
        curve.append(acc)
        ctx.log_metric("static/val_acc", acc, step=epoch + 1)
        ctx.progress(epoch + 1, cfg.baselines.static_epochs, f"val acc {acc:.3f}")
        if acc > best_acc:
            best, best_acc = copy.deepcopy(model.state_dict()), acc
    save_torch(ctx.out_dir / "policy.pt", best)
    ctx.write_metrics({"best_val_acc": best_acc, "best_epoch": int(np.argmax(curve)) + 1, "budget": budget})
