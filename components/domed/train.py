"""Training stages: single-domain teachers, the ERM ensemble (+ temperature), teacher
predictions with the unseen mask, and the distilled students.

All models train with the shared ``components.common.train.fit`` loop for a fixed number of
steps and keep the checkpoint with the best accuracy on the *source-domain* "out" split
(DomainBed training-domain validation). Only ``source_split`` is used here.
"""
from __future__ import annotations

import copy
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from components.common.io import load_torch, read_json, save_torch, write_json_atomic
from components.common.seeds import seed_everything
from components.common.train import fit, make_optimizer
from components.domed.allocation import FILE as ALLOCATION, unseen_mask
from components.domed.data import Split, load_domains, source_split
from components.domed.losses import student_loss
from components.domed.models import make_model, predict_logits

TEACHERS, ENSEMBLE, PREDICTIONS, STUDENT = "teachers.pt", "ensemble.pt", "predictions.pt", "student.pt"


def run_seed(seed: int, test_env: int, role: str) -> int:
    """A distinct, reproducible seed for every model of every fold."""
    return zlib.crc32(f"{seed}/{test_env}/{role}".encode())


def fold_key(test_env: int, seed: int) -> str:
    return f"{test_env}-{seed}"


def batch_stream(n: int, batch_size: int, seed: int):
    """Endless uniform minibatches of row positions (with reshuffling every epoch)."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        for chunk in torch.randperm(n, generator=gen).split(batch_size):
            if len(chunk) == batch_size:
                yield chunk


def train_model(cfg, train: Split, val: Split, loss_fn, steps: int, seed: int, ctx=None,
                prefix: str = "train") -> tuple[torch.nn.Module, float]:
    """Fit a fresh model; ``loss_fn(model, rows)`` gets positions into ``train``. Returns the
    best checkpoint by validation accuracy and that accuracy."""
    seed_everything(seed)
    model = make_model(cfg.model, cfg.data.image_size)
    val_x, val_y = torch.as_tensor(val.x), torch.as_tensor(val.y)
    best = {"acc": -1.0, "state": None}

    def select(m):
        acc = float((predict_logits(m, val_x).argmax(1) == val_y).float().mean())
        if acc > best["acc"]:
            best.update(acc=acc, state=copy.deepcopy(m.state_dict()))
        return {f"{prefix}/val_acc": acc}

    optimizer = make_optimizer(model.parameters(), name="adam", lr=cfg.optim.lr)
    fit(model, batch_stream(len(train.y), cfg.optim.batch_size, seed), loss_fn, steps=steps,
        optimizer=optimizer, ctx=ctx, log_every=max(1, cfg.optim.eval_every // 2),
        eval_fn=select, eval_every=cfg.optim.eval_every, prefix=prefix)
    model.load_state_dict(best["state"])
    return model.eval(), best["acc"]


def cross_entropy_loss(split: Split):
    x, y = torch.as_tensor(split.x), torch.as_tensor(split.y)
    return lambda model, rows: F.cross_entropy(model(x[rows]), y[rows])


def fold_item(ctx) -> tuple[int, int]:
    """(test_env, seed) of this fan-out instance; also pins torch to the one CPU it was given."""
    torch.set_num_threads(1)  # one Ray CPU per instance; more threads only oversubscribe
    return int(ctx.item["test_env"]), int(ctx.item["seed"])


def train_teachers_stage(cfg, ctx) -> None:
    test_env, seed = fold_item(ctx)
    arrays = load_domains(ctx.inputs["build_domains"])
    taus = read_json(ctx.inputs["allocate"] / ALLOCATION)[str(test_env)]["teachers"]
    states, val_accs = [], []
    for m, tau in enumerate(taus):
        train, val = source_split(arrays, test_env, "in", tau), source_split(arrays, test_env, "out", tau)
        model, acc = train_model(cfg, train, val, cross_entropy_loss(train), cfg.optim.teacher_steps,
                                 run_seed(seed, test_env, f"teacher{m}"), ctx, prefix=f"teacher{m}")
        states.append(model.state_dict())
        val_accs.append(acc)
    save_torch(ctx.out_dir / TEACHERS, {"teachers": taus, "states": states})
    ctx.write_metrics({"teacher_val_acc_mean": float(np.mean(val_accs)), "n_teachers": len(taus)})


def fit_temperature(logits: np.ndarray, labels: np.ndarray, grid: tuple[float, float, int]) -> float:
    """Temperature minimising NLL on held-out *source* data (log-spaced grid search)."""
    lo, hi, n = grid
    temps = np.geomspace(lo, hi, int(n))
    logits_t = torch.as_tensor(logits)
    labels_t = torch.as_tensor(labels)
    nlls = [float(F.cross_entropy(logits_t / t, labels_t)) for t in temps]
    return float(temps[int(np.argmin(nlls))])


def train_erm_stage(cfg, ctx) -> None:
    """Deep ensemble of ERMs on all source domains; member 0 is the ERM baseline, and the
    whole ensemble is also the teacher set of seen-domain KD."""
    test_env, seed = fold_item(ctx)
    arrays = load_domains(ctx.inputs["build_domains"])
    train, val = source_split(arrays, test_env, "in"), source_split(arrays, test_env, "out")
    states, val_accs = [], []
    for k in range(cfg.baselines.n_ensemble):
        model, acc = train_model(cfg, train, val, cross_entropy_loss(train), cfg.optim.steps,
                                 run_seed(seed, test_env, f"erm{k}"), ctx, prefix=f"erm{k}")
        states.append(model.state_dict())
        val_accs.append(acc)
        if k == 0:
            temperature = fit_temperature(predict_logits(model, val.x).numpy(), val.y,
                                          cfg.baselines.temperature_grid)
    save_torch(ctx.out_dir / ENSEMBLE, {"states": states, "temperature": temperature})
    ctx.write_metrics({"erm_val_acc": val_accs[0], "ensemble_val_acc_mean": float(np.mean(val_accs)),
                       "erm_temperature": temperature})


def load_models(cfg, states: list[dict]) -> list[torch.nn.Module]:
    models = []
    for state in states:
        model = make_model(cfg.model, cfg.data.image_size)
        model.load_state_dict(state)
        models.append(model.eval())
    return models


def teacher_predict_stage(cfg, ctx) -> None:
    """Logits of every teacher on every source row, plus who may teach which row:
    ``unseen`` (single-domain teachers, masked by domain) and ``seen`` (ERM ensemble, all)."""
    test_env, seed = fold_item(ctx)
    key = fold_key(test_env, seed)
    arrays = load_domains(ctx.inputs["build_domains"])
    rows = np.flatnonzero(arrays["domain"] != test_env)  # source rows only, in and out
    x, domains = torch.as_tensor(arrays["x"][rows]), arrays["domain"][rows]
    teachers = load_torch(ctx.inputs["train_teachers"][key] / TEACHERS)
    ensemble = load_torch(ctx.inputs["train_erm"][key] / ENSEMBLE)

    def stack(states):
        return torch.stack([predict_logits(m, x) for m in load_models(cfg, states)], dim=1)

    unseen_logits, seen_logits = stack(teachers["states"]), stack(ensemble["states"])
    mask = torch.as_tensor(unseen_mask(domains, teachers["teachers"]))
    save_torch(ctx.out_dir / PREDICTIONS, {
        "rows": torch.as_tensor(rows), "domain": torch.as_tensor(domains),
        "unseen": {"logits": unseen_logits, "mask": mask, "teachers": teachers["teachers"]},
        "seen": {"logits": seen_logits, "mask": torch.ones(seen_logits.shape[:2], dtype=torch.bool)},
    })
    ctx.write_metrics(teacher_diagnostics(unseen_logits, mask, torch.as_tensor(arrays["y"][rows])))


def teacher_diagnostics(logits: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> dict:
    """Why unseen targets calibrate: teachers are over-confident on their own domain and
    less so elsewhere. Also pairwise disagreement (ensemble diversity)."""
    probs = torch.softmax(logits, dim=-1)
    conf, pred = probs.max(-1)
    correct = (pred == labels[:, None]).float()
    seen = ~mask
    m = logits.shape[1]
    disagree = [float((pred[:, i] != pred[:, j]).float().mean()) for i in range(m) for j in range(i + 1, m)]
    return {
        "teacher_acc_seen": float(correct[seen].mean()), "teacher_conf_seen": float(conf[seen].mean()),
        "teacher_acc_unseen": float(correct[mask].mean()), "teacher_conf_unseen": float(conf[mask].mean()),
        "teacher_disagreement": float(np.mean(disagree)) if disagree else 0.0,
    }


def student_data(predictions: dict, arrays: dict, test_env: int, teachers: str, split: str):
    """The rows of ``split`` with their teacher logits and mask, aligned by row id."""
    part = source_split(arrays, test_env, split)
    position = {int(r): i for i, r in enumerate(predictions["rows"].tolist())}
    take = torch.as_tensor([position[int(r)] for r in part.index])
    chosen = predictions[teachers]
    return part, chosen["logits"][take], chosen["mask"][take]


def train_student_stage(cfg, ctx) -> None:
    test_env, seed = fold_item(ctx)
    variant = ctx.item["variant"]
    spec, student = cfg.student.specs[variant], cfg.student
    arrays = load_domains(ctx.inputs["build_domains"])
    predictions = load_torch(ctx.inputs["teacher_predict"][fold_key(test_env, seed)] / PREDICTIONS)
    train, teacher_logits, mask = student_data(predictions, arrays, test_env, spec.teachers, "in")
    val = source_split(arrays, test_env, "out")
    x, y = torch.as_tensor(train.x), torch.as_tensor(train.y)

    def loss_fn(model, rows):
        return student_loss(model(x[rows]), teacher_logits[rows], mask[rows], y[rows],
                            distill_weight=spec.distill_weight, dirichlet_weight=spec.dirichlet_weight,
                            label_weight=spec.label_weight, temperature=student.temperature,
                            clip=student.logit_clip, floor=student.prob_floor)

    model, acc = train_model(cfg, train, val, loss_fn, cfg.optim.steps,
                             run_seed(seed, test_env, f"student/{variant}"), ctx, prefix="student")
    save_torch(ctx.out_dir / STUDENT, model.state_dict())
    write_json_atomic(ctx.out_dir / "spec.json", spec.model_dump())
    ctx.write_metrics({"val_acc": acc})
