"""Task data for the adapters, and the ``prepare_tasks`` stage.

Text tasks (small profile): every sentence gets a random sentiment, topic, tense and form
(question or statement), independently, so each task must read one attribute and ignore the
others. Each task's head is its *zero-shot* head: the MiniLM embeddings of one description per
class (as CLIP's class-name heads in the vision merging benchmarks), kept frozen, so everything a
task learns lives in its adapter.

Digits tasks (smoke): sklearn digits under a fixed pixel permutation, a left-right flip, or a
quarter-turn rotation; the head is the frozen head of an MLP pre-trained on clean digits.

CLIP image tasks (paper profile): image folders under ``paper.data_root``, see
``components.circumerge.vision``.
"""
from __future__ import annotations

import numpy as np
import torch

from components.common.io import save_torch, write_json_atomic, write_table
from components.common.seeds import seed_everything

SUBJECTS = ["the chef", "my friend", "the team", "our teacher", "the reviewer", "my sister",
            "the crowd", "the student", "his uncle", "the critic", "a neighbour", "the manager"]
VERBS = [("sees", "saw", "see"), ("watches", "watched", "watch"), ("brings", "brought", "bring"),
         ("finds", "found", "find"), ("describes", "described", "describe"),
         ("mentions", "mentioned", "mention"), ("reviews", "reviewed", "review"),
         ("shows", "showed", "show")]
ADJECTIVES = {"positive": ["wonderful", "great", "excellent", "delightful", "brilliant", "lovely",
                           "superb", "pleasant"],
              "negative": ["terrible", "awful", "horrible", "dreadful", "boring", "poor",
                           "disappointing", "nasty"]}
OBJECTS = {"sports": ["match", "game", "race", "tournament", "goal", "stadium", "coach", "season"],
           "food": ["pizza", "soup", "cake", "dinner", "recipe", "salad", "bread", "restaurant"],
           "technology": ["laptop", "phone", "software", "app", "computer", "website", "robot", "chip"]}
TAILS = ["", " today", " again", " at last", " this week", " with care"]

TEXT_TASKS = {  # task -> (attribute, class names, one zero-shot description per class)
    "sentiment": ("sentiment", ["positive", "negative"],
                  ["this is a positive opinion.", "this is a negative opinion."]),
    "topic": ("topic", ["sports", "food", "technology"],
              ["this is about sports.", "this is about food.", "this is about technology."]),
    "tense": ("tense", ["past", "present"],
              ["this happened in the past.", "this is happening now."]),
    "question": ("form", ["question", "statement"],
                 ["this is a question.", "this is a statement."]),
}
DIGIT_TASKS = ("permuted", "flipped", "rotated")
SPLITS = ("train", "val", "test")


def make_sentence(rng: np.random.Generator) -> tuple[str, dict[str, str]]:
    attrs = {"sentiment": rng.choice(list(ADJECTIVES)), "topic": rng.choice(list(OBJECTS)),
             "tense": rng.choice(["past", "present"]), "form": rng.choice(["question", "statement"])}
    subject = SUBJECTS[rng.integers(len(SUBJECTS))]
    present, past, base = VERBS[rng.integers(len(VERBS))]
    adjective = rng.choice(ADJECTIVES[attrs["sentiment"]])
    obj = rng.choice(OBJECTS[attrs["topic"]])
    tail = TAILS[rng.integers(len(TAILS))]
    if attrs["form"] == "question":
        aux = "did" if attrs["tense"] == "past" else "does"
        text = f"{aux} {subject} {base} the {adjective} {obj}{tail}?"
    else:
        verb = past if attrs["tense"] == "past" else present
        text = f"{subject} {verb} the {adjective} {obj}{tail}."
    return text, attrs


def text_task_split(task: str, n: int, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    attribute, classes, _ = TEXT_TASKS[task]
    texts, labels = [], []
    for _ in range(n):
        text, attrs = make_sentence(rng)
        texts.append(text)
        labels.append(classes.index(attrs[attribute]))
    return texts, np.array(labels)


# ----------------------------------------------------------------------------- text (MiniLM)
def prepare_text_tasks(data, model, out_dir) -> None:
    from components.circumerge.models import split_minilm
    from components.common.minilm import tokenize

    lower, upper = split_minilm(model.first_adapted_layer)

    @torch.inference_mode()
    def lower_states(texts):
        ids, mask = tokenize(texts, data.max_tokens)
        return lower(ids, mask), mask

    rng = seed_everything(data.data_seed)
    rows = {"task": [], "split": [], "text": [], "label": []}
    for task in data.tasks:
        _, classes, prompts = TEXT_TASKS[task]
        record = {}
        for split, n in zip(SPLITS, (data.n_train, data.n_val, data.n_test)):
            texts, labels = text_task_split(task, n, rng)
            x, mask = lower_states(texts)
            record[split] = {"x": x, "mask": mask, "y": torch.as_tensor(labels)}
            rows["task"] += [task] * n
            rows["split"] += [split] * n
            rows["text"] += texts
            rows["label"] += labels.tolist()
        with torch.inference_mode():  # zero-shot head: embeddings of the class descriptions
            class_emb = upper(*lower_states(prompts))
        record["head"] = {"weight": class_emb.clone(), "bias": torch.zeros(len(classes)),
                          "scale": float(model.head_scale)}
        save_torch(out_dir / "tasks" / f"{task}.pt", record)
    write_table(out_dir / "texts.parquet", rows)
    spec = {"n_layers": len(upper.layer), "state": upper.state_dict()}
    save_torch(out_dir / "backbone.pt", {"kind": "minilm", "spec": spec})


# ----------------------------------------------------------------------------- digits (smoke)
def transform_digits(task: str, x: np.ndarray, rng_perm: np.ndarray) -> np.ndarray:
    if task == "permuted":
        return x[:, rng_perm]
    if task == "flipped":
        return x.reshape(-1, 8, 8)[:, :, ::-1].reshape(-1, 64)
    if task == "rotated":
        return np.rot90(x.reshape(-1, 8, 8), k=1, axes=(1, 2)).reshape(-1, 64)
    raise ValueError(f"unknown digits task {task!r}; choose from {DIGIT_TASKS}")


def pretrain_digits_mlp(x: np.ndarray, y: np.ndarray, hidden: int, steps: int, seed: int):
    from components.circumerge.models import DigitsMLP
    from components.common.train import fit

    seed_everything(seed)
    body, head = DigitsMLP(hidden), torch.nn.Linear(hidden, 10)
    net = torch.nn.ModuleDict({"body": body, "head": head})
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y)
    gen = torch.Generator().manual_seed(seed)

    def batches():
        while True:
            idx = torch.randint(0, len(xt), (64,), generator=gen)
            yield xt[idx], yt[idx]

    def loss_fn(m, batch):
        return torch.nn.functional.cross_entropy(m["head"](m["body"](batch[0])), batch[1])

    fit(net, batches(), loss_fn, steps=steps, lr=1e-2, log_every=max(1, steps))
    head_dict = {"weight": head.weight.detach().clone(), "bias": head.bias.detach().clone(), "scale": 1.0}
    return body, head_dict


def prepare_digit_tasks(data, model, out_dir) -> None:
    from sklearn.datasets import load_digits

    rng = seed_everything(data.data_seed)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = rng.permutation(len(x))
    n_eval = data.n_val + data.n_test
    test_idx, val_idx = order[-data.n_test:], order[-n_eval:-data.n_test]
    pool_idx = order[:-n_eval]            # pre-training and task training draw from here only
    body, head = pretrain_digits_mlp(x[pool_idx], y[pool_idx], model.digits_hidden,
                                     model.digits_pretrain_steps, data.data_seed)
    perm = rng.permutation(64)
    for task in data.tasks:
        train_idx = rng.choice(pool_idx, size=min(data.n_train, len(pool_idx)), replace=False)
        record = {"head": head}
        for split, idx in zip(SPLITS, (train_idx, val_idx, test_idx)):
            xs = torch.as_tensor(np.ascontiguousarray(transform_digits(task, x[idx], perm)))
            record[split] = {"x": xs, "mask": None, "y": torch.as_tensor(y[idx])}
        save_torch(out_dir / "tasks" / f"{task}.pt", record)
    save_torch(out_dir / "backbone.pt", {"kind": "digits",
                                         "spec": {"hidden": model.digits_hidden, "state": body.state_dict()}})


def prepare_tasks_stage(cfg, ctx) -> None:
    data, model = cfg.data, cfg.model
    counts = {"n_tasks": len(data.tasks), "n_train": data.n_train}
    if data.kind == "minilm":
        prepare_text_tasks(data, model, ctx.out_dir)
    elif data.kind == "digits":
        prepare_digit_tasks(data, model, ctx.out_dir)
    else:
        from components.circumerge.vision import prepare_clip_tasks

        counts |= prepare_clip_tasks(data, model, cfg.paper, ctx.out_dir)
    write_json_atomic(ctx.out_dir / "tasks.json", {"kind": data.kind, "tasks": list(data.tasks)})
    ctx.write_metrics(counts)
