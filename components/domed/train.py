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
from components.domed.data import Split, fold_envs, load_domains, source_split, take
from components.domed.losses import student_loss
from components.domed.models import make_model, predict_logits

TEACHERS, ENSEMBLE, PREDICTIONS, STUDENTS = "teachers.pt", "ensemble.pt", "predictions.pt", "students.pt"
DIAGNOSTICS = "teacher_diagnostics.json"
SELECTED = "selected_hparams.json"


def run_seed(seed: int, test_env: int, role: str) -> int:
    """A distinct, reproducible seed for every model of every fold."""
    return zlib.crc32(f"{seed}/{test_env}/{role}".encode())


def instance_key(benchmark: str, seed: int) -> str:
    """Key of a (benchmark, seed) fan-out instance, as the runtime names it."""
    return f"{benchmark}-{seed}"


def batch_stream(n: int, batch_size: int, seed: int):
    """Endless uniform minibatches of row positions (with reshuffling every epoch). A split
    smaller than one batch gives all its rows, reshuffled, as every batch (dropping the short
    last chunk would leave nothing to yield, and the stream would spin forever)."""
    if n < 1:
        raise ValueError("cannot draw minibatches from an empty split")
    gen = torch.Generator().manual_seed(seed)
    full = min(batch_size, n)
    while True:
        for chunk in torch.randperm(n, generator=gen).split(full):
            if len(chunk) == full:
                yield chunk


def domain_batches(domains: np.ndarray, per_domain: int, seed: int):
    """DomainBed's minibatches: ``per_domain`` rows from every domain present, each domain's
    rows reshuffled every epoch on their own. Yields positions into ``domains``."""
    streams = []
    for d in np.unique(domains):
        rows = torch.as_tensor(np.flatnonzero(domains == d))
        if len(rows) < per_domain:   # batch_stream would never yield a full batch
            raise ValueError(f"domain {d} has {len(rows)} training rows, fewer than the {per_domain} a batch takes")
        streams.append((rows, batch_stream(len(rows), per_domain, seed + int(d))))
    while True:
        yield torch.cat([rows[next(stream)] for rows, stream in streams])


def training_batches(cfg, train: Split, seed: int):
    if cfg.optim.per_domain_batch:
        return domain_batches(train.domain, cfg.optim.batch_size, seed)
    return batch_stream(len(train.y), cfg.optim.batch_size, seed)


def cpu_state(model: torch.nn.Module) -> dict:
    """A checkpoint kept on the CPU: a GPU copy per checkpoint would double memory."""
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


class BestCheckpoint:
    """Keeps the state with the highest validation accuracy seen so far."""

    def __init__(self):
        self.acc, self.state = -1.0, None

    def offer(self, model: torch.nn.Module, acc: float) -> float:
        if acc > self.acc:
            self.acc, self.state = acc, cpu_state(model)
        return acc


class MovingAverage:
    """EoA's simple moving average of the weights (Arpit et al. 2022): a copy of the live
    weights until update ``start``, then after every optimiser step t >= start the running mean
    of the weights after steps start-1 .. t. Buffers (frozen BatchNorm statistics) follow the
    live model. Hooked on the optimiser, so the training run itself is untouched."""

    def __init__(self, model: torch.nn.Module, start: int):
        self.live, self.start, self.updates = model, int(start), 0
        self.model = copy.deepcopy(model).eval()

    @torch.no_grad()
    def update(self, *_hook_args) -> None:
        self.updates += 1
        count = self.updates - self.start + 1          # weights averaged before this step's
        for avg, live in zip(self.model.parameters(), self.live.parameters()):
            if count < 1:
                avg.copy_(live)
            else:
                avg.mul_(count / (count + 1)).add_(live.detach(), alpha=1.0 / (count + 1))
        for avg, live in zip(self.model.buffers(), self.live.buffers()):
            avg.copy_(live)


def accuracy(cfg, model: torch.nn.Module, split: Split) -> float:
    predicted = predict_logits(model, split.x, cfg.model.predict_batch).argmax(1)
    return float((predicted == torch.as_tensor(split.y)).float().mean())


def train_model(cfg, train: Split, val: Split, loss_fn, steps: int, seed: int, ctx=None,
                prefix: str = "train", n_classes: int = 10, average_from: int | None = None):
    """Fit a fresh model; ``loss_fn(model, rows)`` gets positions into ``train``. Returns the
    best checkpoint by validation accuracy and that accuracy; with ``average_from`` also the
    best (by the same validation) moving average of the weights and its accuracy, as EoA keeps."""
    seed_everything(seed)
    model = make_model(cfg.model, cfg.data.image_size, n_classes)
    optimizer = make_optimizer(model.parameters(), name="adam", lr=cfg.optim.lr)
    best, best_average = BestCheckpoint(), BestCheckpoint()
    averages = None
    if average_from is not None:
        averages = MovingAverage(model, average_from)
        optimizer.register_step_post_hook(averages.update)

    def select(m):
        record = {f"{prefix}/val_acc": best.offer(m, accuracy(cfg, m, val))}
        if averages is not None:
            record[f"{prefix}/average_val_acc"] = best_average.offer(averages.model, accuracy(cfg, averages.model, val))
        return record

    fit(model, training_batches(cfg, train, seed), loss_fn, steps=steps, optimizer=optimizer,
        schedule=cfg.optim.schedule, grad_clip=cfg.optim.grad_clip, ctx=ctx, log_every=cfg.optim.eval_every,
        eval_fn=select, eval_every=cfg.optim.eval_every, prefix=prefix)
    model.load_state_dict(best.state)
    if averages is None:
        return model.eval(), best.acc
    averages.model.load_state_dict(best_average.state)
    return model.eval(), best.acc, averages.model.eval(), best_average.acc


def average_states(states: list[dict]) -> dict:
    """DiWA's uniform weight average of several runs' checkpoints (float tensors averaged;
    integer buffers such as BatchNorm's step counter taken from the first)."""
    return {k: torch.stack([s[k] for s in states]).mean(0) if states[0][k].is_floating_point() else states[0][k]
            for k in states[0]}


def training_images(cfg, split: Split, seed: int):
    """What a training loss reads: the split's images, with DomainBed's augmentation when they
    are image files and ``data.augment`` is on (digit arrays are used as they are)."""
    if cfg.data.augment and hasattr(split.x, "augmented"):
        return split.x.augmented(seed)
    return split.x


def cross_entropy_loss(cfg, split: Split, seed: int):
    x, y = training_images(cfg, split, seed), torch.as_tensor(split.y)
    return lambda model, rows: F.cross_entropy(model(take(x, rows)), y[rows])


def instance_item(ctx) -> tuple[str, int]:
    """(benchmark, seed) of this fan-out instance; also pins torch to the one CPU it was given."""
    torch.set_num_threads(1)  # one Ray CPU per instance; more threads only oversubscribe
    return str(ctx.item["benchmark"]), int(ctx.item["seed"])


def train_teachers_stage(cfg, ctx) -> None:
    """One ERM teacher per source domain, for every test domain of this (benchmark, seed)."""
    benchmark, seed = instance_item(ctx)
    arrays = load_domains(ctx.inputs["build_domains"], benchmark, cfg.data)
    allocation = read_json(ctx.inputs["allocate"] / ALLOCATION)[benchmark]
    folds, val_accs = {}, []
    for test_env in fold_envs(cfg.data.test_envs, arrays["n_domains"]):
        taus = allocation[str(test_env)]["teachers"]
        states = []
        for m, tau in enumerate(taus):
            train, val = source_split(arrays, test_env, "in", tau), source_split(arrays, test_env, "out", tau)
            model_seed = run_seed(seed, test_env, f"{benchmark}/teacher{m}")
            model, acc = train_model(cfg, train, val, cross_entropy_loss(cfg, train, model_seed),
                                     cfg.optim.teacher_steps, model_seed, ctx,
                                     prefix=f"env{test_env}/teacher{m}", n_classes=arrays["n_classes"])
            states.append(model.state_dict())
            val_accs.append(acc)
        folds[test_env] = {"teachers": taus, "states": states}
    save_torch(ctx.out_dir / TEACHERS, folds)
    ctx.write_metrics({"teacher_val_acc_mean": float(np.mean(val_accs)), "n_teachers": len(val_accs)})


def fit_temperature(logits: np.ndarray, labels: np.ndarray, grid: tuple[float, float, int]) -> float:
    """Temperature minimising NLL on held-out *source* data (log-spaced grid search)."""
    lo, hi, n = grid
    temps = np.geomspace(lo, hi, int(n))
    logits_t = torch.as_tensor(logits)
    labels_t = torch.as_tensor(labels)
    nlls = [float(F.cross_entropy(logits_t / t, labels_t)) for t in temps]
    return float(temps[int(np.argmin(nlls))])


def train_erm_stage(cfg, ctx) -> None:
    """Deep ensemble of ERMs on all source domains, per test domain; member 0 is the ERM
    baseline, and the whole ensemble is also the teacher set of seen-domain KD."""
    benchmark, seed = instance_item(ctx)
    arrays = load_domains(ctx.inputs["build_domains"], benchmark, cfg.data)
    folds, erm_accs, temperatures = {}, [], []
    for test_env in fold_envs(cfg.data.test_envs, arrays["n_domains"]):
        train, val = source_split(arrays, test_env, "in"), source_split(arrays, test_env, "out")
        states, averages = [], []
        for k in range(cfg.baselines.n_ensemble):
            model_seed = run_seed(seed, test_env, f"{benchmark}/erm{k}")
            trained = train_model(cfg, train, val, cross_entropy_loss(cfg, train, model_seed), cfg.optim.steps,
                                  model_seed, ctx, prefix=f"env{test_env}/erm{k}", n_classes=arrays["n_classes"],
                                  average_from=cfg.baselines.eoa_start if cfg.baselines.eoa else None)
            model, acc = trained[:2]
            states.append(model.state_dict())
            if cfg.baselines.eoa:
                averages.append(trained[2].state_dict())
            if k == 0:
                erm_accs.append(acc)
                temperature = fit_temperature(predict_logits(model, val.x, cfg.model.predict_batch).numpy(),
                                              val.y, cfg.baselines.temperature_grid)
                temperatures.append(temperature)
        folds[test_env] = {"states": states, "temperature": temperature, **weight_averaged(cfg, states, averages)}
    save_torch(ctx.out_dir / ENSEMBLE, folds)
    ctx.write_metrics({"erm_val_acc": float(np.mean(erm_accs)), "erm_temperature": float(np.mean(temperatures))})


def weight_averaged(cfg, states: list[dict], averages: list[dict]) -> dict:
    """What the weight-averaging baselines need from one fold's ERM members: EoA's moving
    averages (ensembled at evaluation) and DiWA's uniform average of the members' checkpoints."""
    out = {}
    if cfg.baselines.eoa:
        out["eoa_states"] = averages
    if cfg.baselines.diwa:
        out["diwa_state"] = average_states(states)
    return out


def load_models(cfg, states: list[dict], n_classes: int = 10) -> list[torch.nn.Module]:
    models = []
    for state in states:
        model = make_model(cfg.model, cfg.data.image_size, n_classes)
        model.load_state_dict(state)
        models.append(model.eval())
    return models


def teacher_predict_stage(cfg, ctx) -> None:
    """Logits of every teacher on every source row (shortcut lit, as in training), plus who may
    teach which row: ``unseen`` (single-domain teachers, masked by domain) and ``seen`` (ERM
    ensemble, all). Also the premise diagnostics, on source rows only."""
    benchmark, seed = instance_item(ctx)
    arrays = load_domains(ctx.inputs["build_domains"], benchmark, cfg.data)
    teachers = load_torch(ctx.inputs["train_teachers"] / TEACHERS)     # this instance's item only
    ensembles = load_torch(ctx.inputs["train_erm"] / ENSEMBLE)
    folds, diagnostics = {}, {}
    for test_env in fold_envs(cfg.data.test_envs, arrays["n_domains"]):
        rows = source_split(arrays, test_env, None)  # source rows only, in and out

        def stack(states):
            return torch.stack([predict_logits(m, rows.x, cfg.model.predict_batch)
                                for m in load_models(cfg, states, arrays["n_classes"])], dim=1)

        unseen_logits, seen_logits = stack(teachers[test_env]["states"]), stack(ensembles[test_env]["states"])
        mask = torch.as_tensor(unseen_mask(rows.domain, teachers[test_env]["teachers"]))
        folds[test_env] = {
            "rows": torch.as_tensor(rows.index), "domain": torch.as_tensor(rows.domain),
            "unseen": {"logits": unseen_logits, "mask": mask, "teachers": teachers[test_env]["teachers"]},
            "seen": {"logits": seen_logits, "mask": torch.ones(seen_logits.shape[:2], dtype=torch.bool)},
        }
        is_val = torch.as_tensor(arrays["split"][rows.index] == "out")
        diagnostics[test_env] = teacher_diagnostics(unseen_logits, mask, torch.as_tensor(rows.y), is_val)
    save_torch(ctx.out_dir / PREDICTIONS, folds)
    write_json_atomic(ctx.out_dir / DIAGNOSTICS, {str(e): d for e, d in diagnostics.items()})
    ctx.write_metrics({name: float(np.mean([d[name] for d in diagnostics.values()]))
                       for name in next(iter(diagnostics.values()))})


def teacher_diagnostics(logits: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
                        is_val: torch.Tensor) -> dict:
    """The premise quantities, pooled over one fold's teachers: accuracy, confidence and
    over-confidence (confidence - accuracy) on the teacher's own domain's validation rows
    (``seen_val``; also its training rows, ``seen_train``) and on the rows of source domains it
    never saw (``unseen``). Plus pairwise disagreement (ensemble diversity)."""
    probs = torch.softmax(logits, dim=-1)
    conf, pred = probs.max(-1)
    correct = (pred == labels[:, None]).float()
    groups = {"seen_val": ~mask & is_val[:, None], "seen_train": ~mask & ~is_val[:, None], "unseen": mask}
    out = {}
    for name, rows in groups.items():
        acc, confidence = float(correct[rows].mean()), float(conf[rows].mean())
        out.update({f"teacher_acc_{name}": acc, f"teacher_conf_{name}": confidence,
                    f"teacher_overconf_{name}": confidence - acc})
    seen = out["teacher_acc_seen_val"]     # 0 only for an untrained teacher (tiny paper-shape runs)
    out["premise_acc_ratio"] = out["teacher_acc_unseen"] / seen if seen > 0 else float("nan")
    out["premise_overconf_gap"] = out["teacher_overconf_unseen"] - out["teacher_overconf_seen_val"]
    m = logits.shape[1]
    disagree = [float((pred[:, i] != pred[:, j]).float().mean()) for i in range(m) for j in range(i + 1, m)]
    out["teacher_disagreement"] = float(np.mean(disagree)) if disagree else 0.0
    return out


def student_data(fold: dict, arrays: dict, test_env: int, teachers: str, split: str):
    """The rows of ``split`` with their teacher logits and mask, aligned by row id."""
    part = source_split(arrays, test_env, split)
    position = {int(r): i for i, r in enumerate(fold["rows"].tolist())}
    take = torch.as_tensor([position[int(r)] for r in part.index])
    chosen = fold[teachers]
    return part, chosen["logits"][take], chosen["mask"][take]


def train_student_stage(cfg, ctx) -> None:
    """Every distilled variant, for every test domain of this (benchmark, seed); where a search
    grid is set, the (T, beta) with the best source-validation accuracy per fold."""
    benchmark, seed = instance_item(ctx)
    arrays = load_domains(ctx.inputs["build_domains"], benchmark, cfg.data)
    predictions = load_torch(ctx.inputs["teacher_predict"] / PREDICTIONS)   # this instance's item only
    states, val_accs, chosen = {}, {}, {}
    for variant in cfg.student.variants:
        states[variant] = {}
        for test_env in fold_envs(cfg.data.test_envs, arrays["n_domains"]):
            model, acc, choice = select_student(cfg, arrays, predictions[test_env], test_env, variant, seed,
                                                benchmark, ctx)
            states[variant][test_env] = model.state_dict()
            val_accs.setdefault(variant, []).append(acc)
            chosen.setdefault(variant, []).append(choice)
    save_torch(ctx.out_dir / STUDENTS, states)
    metrics = {f"{v}/val_acc": float(np.mean(a)) for v, a in val_accs.items()}
    if searching(cfg.student):
        write_json_atomic(ctx.out_dir / SELECTED, chosen)
        metrics.update({f"{v}/selected_{k}": float(np.mean([c[k] for c in cs])) for v, cs in chosen.items()
                        for k in ("temperature", "beta")})
    ctx.write_metrics(metrics)


def searching(student) -> bool:
    return bool(student.search_temperatures or student.search_betas)


def search_grid(student, spec) -> list[dict]:
    """The (T, beta) candidates of one variant: the grid where set, else the fixed values. beta
    is searched only where it weighs L_Dir against L_S (domed): the beta = 0 ablation stays one,
    and end2_only's lone L_Dir would only be rescaled."""
    temperatures = student.search_temperatures or [student.temperature]
    decoupled = spec.dirichlet_weight and spec.distill_weight
    betas = student.search_betas if student.search_betas and decoupled else [spec.dirichlet_weight]
    return [{"temperature": t, "beta": b} for t in temperatures for b in betas]


def select_student(cfg, arrays, fold, test_env, variant, seed, benchmark, ctx):
    """Train every candidate of the variant's grid (same seed: same init and batches) and keep
    the one with the best source-validation accuracy (the first on ties)."""
    best = None
    for choice in search_grid(cfg.student, cfg.student.specs[variant]):
        tag = f"/T{choice['temperature']:g}_beta{choice['beta']:g}" if searching(cfg.student) else ""
        model, acc = train_student(cfg, arrays, fold, test_env, variant, seed, benchmark, ctx, tag=tag, **choice)
        if best is None or acc > best[1]:
            best = (model, acc, choice)
    return best


def train_student(cfg, arrays, fold, test_env, variant, seed, benchmark, ctx, temperature: float, beta: float,
                  tag: str = ""):
    spec, student = cfg.student.specs[variant], cfg.student
    train, teacher_logits, mask = student_data(fold, arrays, test_env, spec.teachers, "in")
    val = source_split(arrays, test_env, "out")
    model_seed = run_seed(seed, test_env, f"{benchmark}/student/{variant}")
    x, y = training_images(cfg, train, model_seed), torch.as_tensor(train.y)

    def loss_fn(model, rows):
        return student_loss(model(take(x, rows)), teacher_logits[rows], mask[rows], y[rows],
                            distill_weight=spec.distill_weight, dirichlet_weight=beta,
                            label_weight=spec.label_weight, temperature=temperature,
                            clip=student.logit_clip, floor=student.prob_floor)

    return train_model(cfg, train, val, loss_fn, cfg.optim.steps, model_seed, ctx,
                       prefix=f"env{test_env}/{variant}{tag}", n_classes=arrays["n_classes"])
