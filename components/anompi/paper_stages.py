"""The paper profile's branch of each stage: a Qwen2-VL video LLM as the viewing policy on
UCF-Crime / XD-Violence frames. Each stage function of the small profile calls the function of
the same name here when ``paper.enabled``; the operators (``env.ActiveEnv``), the warm-start
script, the AEI utility, the pairing rule and the DPO loss are the small profile's own code.

What differs from the small profile, and why: the perception is the video LLM itself (no
separate clip encoder; ``pretrain_perception`` decodes frames and their saliency instead), the
policy and the belief are the LLM's likelihoods of operator / answer strings (``vlm.py``), the
policies are LoRA adapters on the frozen checkpoint (a 2B copy per seed and variant would not
fit a disk), and the passive baseline is the warm-started LLM answering from k uniform frames.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import torch

from components.anompi.env import ActiveEnv, action_names, uniform_frames
from components.anompi.vau_data import (cap, classes_of, decode_frames, frame_saliency, list_videos,
                                        split_train_val)
from components.anompi.vlm import Record, VideoLLM, run_episode, trajectory_logps
from components.common.io import read_json, write_json_atomic, write_table
from components.common.seeds import seed_everything

SPLITS = ("train", "val", "test")


# -- models and data ----------------------------------------------------------------------------
def load_image_processor(folder: str):
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(folder, local_files_only=True)


def load_llm(cfg, classes, adapter=None, trainable: bool = False) -> VideoLLM:
    """The checkpoint of ``paper.model_path`` with, optionally, a LoRA adapter folder; a fresh
    trainable LoRA when ``adapter`` is None and ``trainable`` is set."""
    from components.common.hf_models import load_model, load_tokenizer
    from components.common.peft_lora import attach_lora, load_adapter

    p = cfg.paper
    model = load_model(p.model_path, "vlm", device=p.device, dtype=p.dtype)
    if adapter is not None:
        model = load_adapter(model, adapter, trainable=trainable)
    elif trainable:
        model = attach_lora(model, rank=p.lora_rank, alpha=2.0 * p.lora_rank)
    model.eval()               # no dropout: pi equals pi_ref exactly at the start of a round
    return VideoLLM(model, load_tokenizer(p.model_path), load_image_processor(p.model_path), classes,
                    action_names(cfg.policy.n_anchors))


def classes_in(env_dir) -> list[str]:
    return read_json(env_dir / "classes.json")


def make_paper_env(pdir, policy_cfg, split: str) -> ActiveEnv:
    """The small profile's operator environment over decoded videos: it only needs T and the
    per-frame saliency (the warm-start script's input); no belief head (the LLM is the belief)."""
    with np.load(pdir / f"saliency_{split}.npz") as z:
        sal, mot = torch.as_tensor(z["static"]), torch.as_tensor(z["motion"])
    cache = {"emb_static": torch.zeros(*sal.shape, 1), "sal_static": sal, "sal_motion": mot}
    return ActiveEnv(cache, None, policy_cfg)


class Patches:
    """Vision patches per video, computed on first use (the processor is the checkpoint's).
    Only the ``keep`` most recently used videos stay in memory: at paper scale one video's
    patches (128 frames at 224 x 224) take about 150 MB."""

    def __init__(self, llm: VideoLLM, pdir, split: str, keep: int = 16):
        self.llm, self.folder, self.keep = llm, pdir / "frames" / split, keep
        self.memo: OrderedDict[int, torch.Tensor] = OrderedDict()
        self.grid = None

    def __call__(self, vid: int) -> torch.Tensor:
        if vid in self.memo:
            self.memo.move_to_end(vid)
        else:
            frames = np.load(self.folder / f"{vid}.npy")
            self.memo[vid], self.grid = self.llm.patches(frames)
            while len(self.memo) > self.keep:
                self.memo.popitem(last=False)
        return self.memo[vid]


# -- stages ---------------------------------------------------------------------------------------
def build_env(cfg, ctx) -> None:
    p = cfg.paper
    lists = list_videos(p.dataset, p.dataset_root)
    train, val = split_train_val(lists["train"], p.val_share, cfg.env.seed)
    rows = {"train": cap(train, p.max_videos, cfg.env.seed), "val": cap(val, p.max_videos, cfg.env.val_seed),
            "test": cap(lists["test"], p.max_videos, cfg.env.test_seed)}
    classes = list(classes_of(p.dataset))
    offset = 0
    for split in SPLITS:
        r = rows[split]
        write_table(ctx.out_dir / f"{split}.parquet", {
            "video": np.arange(offset, offset + len(r)), "name": [x["name"] for x in r],
            "path": [x["path"] for x in r], "label": np.array([classes.index(x["label_name"]) for x in r]),
            "label_name": [x["label_name"] for x in r],
            "event_start_frame": np.array([x["event_start_frame"] for x in r]),
            "event_end_frame": np.array([x["event_end_frame"] for x in r])})
        offset += len(r)
    write_json_atomic(ctx.out_dir / "classes.json", classes)
    counts = np.bincount([classes.index(x["label_name"]) for x in rows["train"]], minlength=len(classes))
    ctx.write_metrics({"n_train": len(rows["train"]), "n_val": len(rows["val"]), "n_test": len(rows["test"]),
                       **{f"train_{c}": int(k) for c, k in zip(classes, counts)}})


def pretrain_perception(cfg, ctx) -> None:
    """Decode ``paper.n_frames`` uniform frames per video (resized) and their saliency."""
    from components.anompi.data import load_specs

    p = cfg.paper
    metrics = {}
    for split in SPLITS:
        specs = load_specs(ctx.inputs["build_env"] / f"{split}.parquet")
        folder = ctx.out_dir / "frames" / split
        folder.mkdir(parents=True, exist_ok=True)
        static, motion = [], []
        for i, path in enumerate(specs["path"]):
            frames = decode_frames(path, p.n_frames, p.frame_size)
            np.save(folder / f"{i}.npy", frames)
            s, m = frame_saliency(frames)
            static.append(s)
            motion.append(m)
        shape = (0, p.n_frames)
        np.savez(ctx.out_dir / f"saliency_{split}.npz", static=np.array(static).reshape(-1, p.n_frames)
                 if static else np.zeros(shape), motion=np.array(motion).reshape(-1, p.n_frames)
                 if motion else np.zeros(shape))
        metrics[f"n_decoded_{split}"] = len(specs["path"])
        ctx.progress(SPLITS.index(split) + 1, len(SPLITS), f"decoded {split}")
    ctx.write_metrics({**metrics, "n_frames": p.n_frames, "frame_size": p.frame_size})


def passive_answer(llm: VideoLLM, patches: Patches, vid: int, frames: np.ndarray, T: int,
                   batch: int) -> torch.Tensor:
    """The LLM's belief over classes after seeing ``frames`` (one user turn, no operators)."""
    x = patches(vid)
    tpf = llm.tokens_per_frame(patches.grid)
    context = llm.conversation(Record(turn_frames=[list(map(int, frames))]), T, tpf, upto=0)
    answer = len(llm.names) - 1
    cands = [llm.ids(llm.action_text(answer, c)) + llm.ids("<|im_end|>\n") for c in range(len(llm.classes))]
    return torch.softmax(llm.score(context, cands, x, patches.grid, batch), -1)


def passive_baselines(cfg, ctx) -> None:
    """Zero-shot passive viewing by the checkpoint on validation (k uniform frames), for the record."""
    from components.anompi.data import load_specs

    seed_everything(0)
    classes = classes_in(ctx.inputs["build_env"])
    y = load_specs(ctx.inputs["build_env"] / "val.parquet")["label"]
    llm = load_llm(cfg, classes)
    patches = Patches(llm, ctx.inputs["pretrain_perception"], "val")
    T = cfg.paper.n_frames
    metrics = {"n_val": len(y)}
    for k in sorted({cfg.policy.n_anchors, cfg.policy.budget}):
        pred = [int(passive_answer(llm, patches, i, uniform_frames(T, k), T, cfg.paper.score_batch).argmax())
                for i in range(len(y))]
        metrics[f"val_acc_zero_shot_uniform_{k}"] = float(np.mean(np.array(pred) == y)) if len(y) else float("nan")
    ctx.write_metrics(metrics)


def _episodes(llm, env, patches: Patches, videos, mode: str, cfg, rng=None, labels=None) -> list[Record]:
    """Episodes on ``videos``; each mode reads only the params its stages declare (sampling:
    ``rollout``; the script: ``sft``)."""
    p, out = cfg.paper, []
    knobs = {}
    if mode == "sample":
        knobs = {"temperature": cfg.rollout.temperature, "epsilon": cfg.rollout.epsilon}
    elif mode == "script":
        knobs = {"script_threshold": cfg.sft.saliency_threshold}
    for v in videos:
        x = patches(int(v))
        out.append(run_episode(llm, env, int(v), x, patches.grid, mode=mode, rng=rng, thought_tokens=p.thought_tokens,
                               label=-1 if labels is None else int(labels[v]), score_batch=p.score_batch, **knobs))
    return out


def _records_table(records: list[Record], videos, labels, K: int) -> dict:
    actions = np.full((len(records), K + 1), -1, dtype=np.int64)
    for i, r in enumerate(records):
        actions[i, :len(r.actions)] = r.actions
    pred = np.array([r.pred for r in records])
    return {"video": np.asarray(videos), "label": labels[np.asarray(videos)], "actions": actions,
            "frames": np.array([sum(map(len, r.turn_frames)) for r in records]),
            "steps": np.array([len(r.actions) - 1 for r in records]), "pred": pred,
            "correct": (pred == labels[np.asarray(videos)]).astype(np.float64),
            "info_gain": np.array([r.info_gain for r in records]),
            "thought_ids": [[list(map(int, t)) for t in r.thoughts] for r in records],
            "turn_frames": [[list(map(int, f)) for f in r.turn_frames] for r in records]}


def records_of(ro: dict) -> list[Record]:
    return [Record(turn_frames=[list(map(int, f)) for f in tf], actions=[int(a) for a in acts if a >= 0],
                   thoughts=[list(map(int, t)) for t in th], pred=int(pred), info_gain=float(g))
            for tf, acts, th, pred, g in zip(ro["turn_frames"], ro["actions"], ro["thought_ids"], ro["pred"],
                                             ro["info_gain"])]


def _table(ro: dict) -> dict:
    out = dict(ro)
    out["actions"] = [list(map(int, a)) for a in ro["actions"]]
    return out


def sample_rollouts(llm, env, patches, labels, cfg, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    videos = rng.choice(len(labels), size=min(cfg.rollout.n_videos, len(labels)), replace=False)
    videos = np.repeat(videos, cfg.rollout.per_video)
    records = _episodes(llm, env, patches, videos, "sample", cfg, rng=rng)
    return _records_table(records, videos, labels, cfg.policy.max_steps)


def policy_setup(cfg, ctx, adapter: str | None = None, trainable: bool = False):
    """What every policy stage starts from on the training split: its seed, the labels, the LLM
    (optionally with the seed's warm-start adapter), the operator environment and the patches."""
    from components.anompi.data import labels_only, load_specs

    seed = int(ctx.item["seed"])
    seed_everything(seed)
    labels = labels_only(load_specs(ctx.inputs["build_env"] / "train.parquet"))
    pdir = ctx.inputs["pretrain_perception"]
    folder = None if adapter is None else ctx.inputs[adapter][str(seed)] / "adapter"
    llm = load_llm(cfg, classes_in(ctx.inputs["build_env"]), adapter=folder, trainable=trainable)
    return seed, labels, llm, make_paper_env(pdir, cfg.policy, "train"), Patches(llm, pdir, "train")


def sft_policy(cfg, ctx) -> None:
    """Warm start: a LoRA trained on the script's chats (operators, then the true label)."""
    from components.common.peft_lora import save_adapter

    seed, labels, llm, env, patches = policy_setup(cfg, ctx, trainable=True)
    rng = np.random.default_rng(seed)
    videos = rng.choice(len(labels), size=min(cfg.paper.sft_videos, len(labels)), replace=False)
    records = _episodes(llm, env, patches, videos, "script", cfg, labels=labels)
    params = [q for q in llm.model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.paper.sft_lr)
    losses = []
    for step in range(cfg.paper.sft_steps):
        i = step % len(records)
        v = int(videos[i])
        n_tok = sum(m for m in llm.flatten(llm.conversation(records[i], env.T,
                                                            llm.tokens_per_frame(patches.grid)))[1])
        loss = -trajectory_logps(llm, [records[i]], env.T, [patches(v)], patches.grid)[0] / max(n_tok, 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    save_adapter(llm.model, ctx.out_dir / "adapter")
    ctx.write_metrics({"n_script_chats": len(records), "first_loss": losses[0] if losses else float("nan"),
                       "final_loss": losses[-1] if losses else float("nan"),
                       "script_frames": float(np.mean([sum(map(len, r.turn_frames)) for r in records]))})


def rollout(cfg, ctx) -> None:
    seed, labels, llm, env, patches = policy_setup(cfg, ctx, adapter="sft_policy")
    ro = sample_rollouts(llm, env, patches, labels, cfg, seed=1000 + seed)
    write_table(ctx.out_dir / "trajectories.parquet", _table(ro))
    ctx.write_metrics({"n_trajectories": len(ro["video"]), "accuracy": float(ro["correct"].mean()),
                       "frames": float(ro["frames"].mean()), "steps": float(ro["steps"].mean())})


def idpo_round(llm, ro: dict, pairs, patches: Patches, T: int, cfg, rng, prefix: str) -> dict:
    """Multi-turn DPO on trajectory pairs through the shared path
    (``components.common.multiturn_dpo.train_pairs``): a trajectory's log-prob sums its
    assistant tokens only (thoughts, operators, answer; prompt, frame indices and image tokens
    masked); the reference is the policy before this round, evaluated once before the update."""
    from components.common.multiturn_dpo import train_pairs

    records = records_of(ro)
    vids = [int(v) for v in ro["video"]]

    def logps(rows):
        return trajectory_logps(llm, [records[r] for r in rows], T, [patches(vids[r]) for r in rows], patches.grid)

    opt = torch.optim.AdamW([q for q in llm.model.parameters() if q.requires_grad], lr=cfg.paper.dpo_lr)
    res = train_pairs(logps, pairs, opt, beta=cfg.idpo.beta, epochs=cfg.idpo.epochs, batch_size=cfg.paper.dpo_batch,
                      micro_batch=cfg.paper.dpo_micro_batch, rng=rng, ref_batch=cfg.paper.score_batch)
    if not res.losses:
        return {f"{prefix}/n_pairs": 0}
    return {f"{prefix}/n_pairs": res.n_pairs, f"{prefix}/first_loss": res.losses[0],
            f"{prefix}/final_loss": res.losses[-1], f"{prefix}/first_reward_accuracy": res.accuracies[0],
            f"{prefix}/final_reward_accuracy": res.accuracies[-1], f"{prefix}/final_margin": res.margins[-1]}


def train_idpo(cfg, ctx) -> None:
    from components.anompi.train import pairs_from_rollouts, rollouts_from_table
    from components.common.io import read_table
    from components.common.peft_lora import save_adapter

    variant = ctx.item["variant"]
    seed, labels, llm, env, patches = policy_setup(cfg, ctx, adapter="sft_policy", trainable=True)
    rng = np.random.default_rng(seed)
    ro = rollouts_from_table(read_table(ctx.inputs["rollout"][str(seed)] / "trajectories.parquet"))
    pt = read_table(ctx.inputs["build_preferences"][f"{variant}-{seed}"] / "pairs.parquet")
    pairs = list(zip(pt.column("winner").to_pylist(), pt.column("loser").to_pylist(), pt.column("kind").to_pylist()))
    metrics: dict = {}
    patches(0)                                   # sets the grid before the first round
    for r in range(1, cfg.idpo.rounds + 1):
        if r > 1:
            ro = sample_rollouts(llm, env, patches, labels, cfg, seed=1000 * r + seed)
            pairs, _ = pairs_from_rollouts(ro, variant, cfg)
        metrics.update({f"round{r}/rollout_acc": float(ro["correct"].mean()),
                        f"round{r}/rollout_frames": float(ro["frames"].mean()),
                        f"round{r}/rollout_steps": float(ro["steps"].mean())})
        metrics.update(idpo_round(llm, ro, pairs, patches, env.T, cfg, rng, prefix=f"round{r}"))
        ctx.progress(r, cfg.idpo.rounds, f"iDPO round {r}")
    save_adapter(llm.model, ctx.out_dir / "adapter")
    ctx.write_metrics(metrics)


def anomaly_scores(records_probs: list[torch.Tensor], normal: int) -> np.ndarray:
    return np.array([1.0 - float(p[normal]) for p in records_probs])


def detection_metrics(y: np.ndarray, score: np.ndarray, normal: int) -> dict:
    """Video-level anomaly detection (anomalous vs Normal): ROC-AUC and average precision."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    is_anomaly = (y != normal).astype(int)
    if is_anomaly.min() == is_anomaly.max():
        return {"auc": float("nan"), "ap": float("nan")}
    return {"auc": float(roc_auc_score(is_anomaly, score)), "ap": float(average_precision_score(is_anomaly, score))}


def evaluate(cfg, ctx) -> None:
    """Test split: greedy SFT and iDPO policies, passive uniform-k by the warm-started LLM;
    accuracy (the classes), video-level anomaly AUC / AP, frames viewed and operator calls."""
    from components.anompi.data import load_specs

    seed = int(ctx.item["seed"])
    seed_everything(seed)
    classes = classes_in(ctx.inputs["build_env"])
    normal = classes.index("Normal")
    y = load_specs(ctx.inputs["build_env"] / "test.parquet")["label"]
    pdir, T = ctx.inputs["pretrain_perception"], cfg.paper.n_frames
    runs = {"sft": ctx.inputs["sft_policy"][str(seed)]}
    runs.update({f"idpo_{v}": ctx.inputs["train_idpo"][f"{v}-{seed}"] for v in cfg.idpo.variants})
    rows, metrics, actions = [], {}, {}

    def add(policy, acc, frames, steps=0.0, k=-1, auc=float("nan"), ap=float("nan")):
        rows.append({"policy": policy, "k": int(k), "accuracy": acc, "frames": frames, "steps": steps,
                     "seed": seed, "event_motion_seen": float("nan"), "anomaly_auc": auc, "anomaly_ap": ap})

    sft_llm = None
    for name, folder in runs.items():
        llm = load_llm(cfg, classes, adapter=folder / "adapter")
        sft_llm = sft_llm or llm
        env, patches = make_paper_env(pdir, cfg.policy, "test"), Patches(llm, pdir, "test")
        records = _episodes(llm, env, patches, range(len(y)), "greedy", cfg)
        tab = _records_table(records, np.arange(len(y)), y, cfg.policy.max_steps)
        probs = [torch.as_tensor(r.belief) for r in records]
        det = detection_metrics(y, anomaly_scores(probs, normal), normal)
        add(name, float(tab["correct"].mean()), float(tab["frames"].mean()), float(tab["steps"].mean()),
            auc=det["auc"], ap=det["ap"])
        actions[name] = tab["actions"]
    main = "idpo_full" if "idpo_full" in runs else next(n for n in runs if n.startswith("idpo"))
    k_eq = int(math.ceil(next(r["frames"] for r in rows if r["policy"] == main)))
    patches = Patches(sft_llm, pdir, "test")
    for k in sorted({*cfg.evaluate.passive_frames, k_eq}):
        if k > T:
            continue
        probs = [passive_answer(sft_llm, patches, i, uniform_frames(T, k), T, cfg.paper.score_batch)
                 for i in range(len(y))]
        acc = float(np.mean([int(p.argmax()) == yi for p, yi in zip(probs, y)]))
        det = detection_metrics(y, anomaly_scores(probs, normal), normal)
        n_frames = float(len(uniform_frames(T, k)))
        add("passive_uniform", acc, n_frames, k=k, auc=det["auc"], ap=det["ap"])
        if k == k_eq:
            add("passive_uniform_eq", acc, n_frames, k=k, auc=det["auc"], ap=det["ap"])
    for r in rows:
        if r["k"] == -1 or r["policy"].endswith("_eq"):
            for col in ("accuracy", "frames", "anomaly_auc", "anomaly_ap"):
                metrics[f"{'acc' if col == 'accuracy' else col}_{r['policy']}"] = r[col]
            if r["k"] == -1:
                metrics[f"steps_{r['policy']}"] = r["steps"]
    metrics["k_eq"] = k_eq
    write_table(ctx.out_dir / "results.parquet", {c: [r[c] for r in rows] for c in rows[0]})
    np.savez(ctx.out_dir / "actions.npz", **actions)
    ctx.write_metrics(metrics)
