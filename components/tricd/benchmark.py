"""OmniVCHall-like benchmark: a hallucination taxonomy over procedural videos.

Eight evidence types (object, attribute, scene, action, relation, event, temporal, camera). A
*clause* is a checkable statement about the scene program, e.g. ``("action", "red", "square",
"left")``; ``truth(program, clause)`` evaluates it. Four tasks as in the paper:
- ``s_yn``  isolated yes/no: "is it true that <clause> ?"
- ``c_yn``  compositional yes/no: a conjunction of 2-3 clauses of different types
- ``s_mc``  isolated multiple choice: three options of one type, exactly one correct
- ``c_mc``  compositional multiple choice: options of 2-3 different types
Option C of an MC item may be adversarial: "none of the above" (correct iff no statement is
true) or "all are correct" (correct iff every statement is true).

Splits: ``pretrain`` is the backbone's own training data and carries a disclosed language bias
(for ``Bench.biased_types`` the answer is "yes" with rate 0.5 + bias, and an adversarial option
is the answer with rate 1/3 + bias); ``train`` / ``val`` / ``test`` are the benchmark proper,
balanced (yes 0.5, adversarial answer 1/3).
"""
from __future__ import annotations

import json

import numpy as np

from components.tricd import video as V

TYPES = ("object", "attribute", "scene", "action", "relation", "event", "temporal", "camera")
TASKS = ("s_yn", "c_yn", "s_mc", "c_mc")
SPLITS = ("pretrain", "train", "val", "test")
RELATIONS = ("left of", "right of", "above", "below")
MOTION_WORDS = {"still": "stays still", "left": "moves left", "right": "moves right",
                "up": "moves up", "down": "moves down"}
CAMERA_WORDS = {"still": "stays still", "pans_left": "pans left", "pans_right": "pans right",
                "zooms_in": "zooms in"}
NONE_OPTION, ALL_OPTION = "none of the above", "all are correct"
CLEAR_GAP = 3.0   # relation clauses only along an axis where mean centres differ by >= 3 px
LETTERS = ("A", "B", "C")


# ---- clauses ---------------------------------------------------------------------------
def _find(program: dict, color: str, shape: str) -> dict | None:
    for obj in program["objects"]:
        if obj["color"] == color and obj["shape"] == shape:
            return obj
    return None


def _relation_gap(program: dict, a: dict, b: dict, rel: str) -> float:
    """Signed gap that is positive when ``a rel b`` holds."""
    (xa, ya), (xb, yb) = (V.mean_position(o, program["frames"], program["world"]) for o in (a, b))
    return {"left of": xb - xa, "right of": xa - xb, "above": yb - ya, "below": ya - yb}[rel]


def truth(program: dict, clause: tuple) -> bool:
    kind, args = clause[0], clause[1:]
    if kind == "object":
        return _find(program, *args) is not None
    if kind == "attribute":
        shape, color = args
        return any(o["shape"] == shape and o["color"] == color for o in program["objects"])
    if kind == "scene":
        return program["scene"] == args[0]
    if kind == "camera":
        return program["camera"] == args[0]
    if kind == "action":
        obj = _find(program, args[0], args[1])
        return obj is not None and obj["motion"] == args[2]
    if kind == "event":
        obj = _find(program, args[0], args[1])
        return obj is not None and obj["event"] == args[2]
    if kind == "relation":
        a, b = _find(program, args[0], args[1]), _find(program, args[3], args[4])
        return a is not None and b is not None and _relation_gap(program, a, b, args[2]) > 0
    if kind == "temporal":
        a, b = _find(program, args[0], args[1]), _find(program, args[3], args[4])
        return (a is not None and b is not None and a["event"] == args[2] and b["event"] == args[5]
                and a["t_event"] < b["t_event"])
    raise ValueError(f"unknown clause type {kind!r}")


def render_clause(clause: tuple) -> str:
    kind, a = clause[0], clause[1:]
    if kind == "object":
        return f"there is a {a[0]} {a[1]}"
    if kind == "attribute":
        return f"the {a[0]} is {a[1]}"
    if kind == "scene":
        return f"the scene is {a[0]}"
    if kind == "camera":
        return f"the camera {CAMERA_WORDS[a[0]]}"
    if kind == "action":
        return f"the {a[0]} {a[1]} {MOTION_WORDS[a[2]]}"
    if kind == "event":
        return f"the {a[0]} {a[1]} {a[2]}"
    if kind == "relation":
        return f"the {a[0]} {a[1]} is {a[2]} the {a[3]} {a[4]}"
    if kind == "temporal":
        return f"the {a[0]} {a[1]} {a[2]} before the {a[3]} {a[4]} {a[5]}"
    raise ValueError(kind)


def _pick(rng, seq):
    seq = list(seq)
    return seq[int(rng.integers(len(seq)))] if seq else None


def sample_clause(program: dict, kind: str, want: bool, rng: np.random.Generator) -> tuple | None:
    """A clause of type ``kind`` whose truth value is ``want``: a minimal edit of a true
    statement when ``want`` is False (hard negative). None when the scene cannot support it."""
    objs = program["objects"]
    obj = objs[int(rng.integers(len(objs)))]
    if kind == "object":
        if want:
            return ("object", obj["color"], obj["shape"])
        cands = [("object", c, obj["shape"]) for c in V.COLORS] + \
                [("object", obj["color"], s) for s in V.SHAPES]
        return _pick(rng, [c for c in cands if not truth(program, c)])
    if kind == "attribute":
        color = obj["color"] if want else _pick(rng, [c for c in V.COLORS if c != obj["color"]])
        return ("attribute", obj["shape"], color)
    if kind == "scene":
        return ("scene", program["scene"] if want else _pick(rng, [s for s in V.SCENES if s != program["scene"]]))
    if kind == "camera":
        return ("camera", program["camera"] if want else _pick(rng, [c for c in V.CAMERAS if c != program["camera"]]))
    if kind == "action":
        motion = obj["motion"] if want else _pick(rng, [m for m in V.MOTIONS if m != obj["motion"]])
        return ("action", obj["color"], obj["shape"], motion)
    if kind == "event":
        if want:
            with_event = [o for o in objs if o["event"] != "none"]
            o = _pick(rng, with_event)
            return None if o is None else ("event", o["color"], o["shape"], o["event"])
        ev = _pick(rng, [e for e in ("appears", "disappears") if e != obj["event"]])
        return ("event", obj["color"], obj["shape"], ev)
    if kind == "relation":
        a, b = (objs[0], objs[1]) if rng.random() < 0.5 else (objs[1], objs[0])
        clear = [r for r in RELATIONS if _relation_gap(program, a, b, r) >= CLEAR_GAP]
        if not clear:
            return None
        rel = _pick(rng, clear)
        if not want:
            rel = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}[rel]
        return ("relation", a["color"], a["shape"], rel, b["color"], b["shape"])
    if kind == "temporal":
        if any(o["event"] == "none" for o in objs):
            return None
        first, second = sorted(objs, key=lambda o: o["t_event"])
        if not want:
            first, second = second, first
        return ("temporal", first["color"], first["shape"], first["event"],
                second["color"], second["shape"], second["event"])
    raise ValueError(kind)


def caption(program: dict) -> str:
    """A dense description of the video (the backbone's captioning pretraining target): one
    true clause per evidence type the scene supports, objects in colour order."""
    parts = [render_clause(("scene", program["scene"])), render_clause(("camera", program["camera"]))]
    for obj in sorted(program["objects"], key=lambda o: o["color"]):
        parts.append(render_clause(("action", obj["color"], obj["shape"], obj["motion"])))
        if obj["event"] != "none":
            parts.append(render_clause(("event", obj["color"], obj["shape"], obj["event"])))
    a, b = sorted(program["objects"], key=lambda o: o["color"])
    gaps = {r: _relation_gap(program, a, b, r) for r in RELATIONS}
    rel = max(gaps, key=gaps.get)
    if gaps[rel] >= CLEAR_GAP:
        parts.append(render_clause(("relation", a["color"], a["shape"], rel, b["color"], b["shape"])))
    if _feasible(program, "temporal"):
        first, second = sorted(program["objects"], key=lambda o: o["t_event"])
        parts.append(render_clause(("temporal", first["color"], first["shape"], first["event"],
                                    second["color"], second["shape"], second["event"])))
    return " . ".join(parts) + " ."


# ---- QA items ----------------------------------------------------------------------------
def _feasible(program: dict, kind: str) -> bool:
    if kind == "temporal":
        return all(o["event"] != "none" for o in program["objects"])
    if kind == "relation":
        a, b = program["objects"]
        return any(_relation_gap(program, a, b, r) >= CLEAR_GAP for r in RELATIONS)
    if kind == "event":
        return any(o["event"] != "none" for o in program["objects"])
    return True


def _rates(types, split: str, bias: float, biased_types) -> tuple[float, float]:
    """(P(yes), P(adversarial option is the answer)) for an item of these types."""
    skew = split == "pretrain" and any(t in biased_types for t in types)
    return (0.5 + bias, 1 / 3 + bias) if skew else (0.5, 1 / 3)


def make_item(program: dict, task: str, split: str, rng: np.random.Generator, *, bias: float,
              biased_types, adversarial_rate: float, max_tries: int = 50) -> dict | None:
    feasible = [t for t in TYPES if _feasible(program, t)]
    for _ in range(max_tries):
        n_types = 1 if task.startswith("s_") else int(rng.integers(2, 4))
        if len(feasible) < n_types:
            return None
        types = [str(t) for t in rng.choice(feasible, size=n_types, replace=False)]
        p_yes, p_adv = _rates(types, split, bias, biased_types)
        if task.endswith("yn"):
            yes = bool(rng.random() < p_yes)
            wants = [True] * n_types
            if not yes:
                wants[int(rng.integers(n_types))] = False
            clauses = [sample_clause(program, t, w, rng) for t, w in zip(types, wants)]
            if any(c is None for c in clauses):
                continue
            question = "is it true that " + " and ".join(render_clause(c) for c in clauses) + " ?"
            return {"task": task, "types": types, "question": question, "options": [],
                    "answer": "yes" if yes else "no", "adversarial": "",
                    "clauses": json.dumps(clauses)}
        # multiple choice
        adversarial = ""
        if rng.random() < adversarial_rate:
            adversarial = "none" if rng.random() < 0.5 else "all"
        n_statements = 3 if not adversarial else 2
        option_types = (types * 3)[:n_statements] if task == "s_mc" else \
            [types[i % n_types] for i in range(n_statements)]
        adv_answer = bool(adversarial) and rng.random() < p_adv
        if adv_answer:
            wants = [adversarial == "all"] * n_statements
        else:
            wants = [False] * n_statements
            wants[int(rng.integers(n_statements))] = True
        clauses = [sample_clause(program, t, w, rng) for t, w in zip(option_types, wants)]
        if any(c is None for c in clauses) or len(set(clauses)) < len(clauses):
            continue
        options = [render_clause(c) for c in clauses]
        if adversarial:
            options.append(NONE_OPTION if adversarial == "none" else ALL_OPTION)
        answer = LETTERS[2] if adv_answer else LETTERS[wants.index(True)]
        question = "which is true ? " + " ".join(f"{L} {o}" for L, o in zip(LETTERS, options))
        return {"task": task, "types": sorted(set(types)), "question": question,
                "options": options, "answer": answer, "adversarial": adversarial,
                "clauses": json.dumps(clauses)}
    return None


def check_answer(program: dict, item: dict) -> str:
    """Re-derive the answer of an item from the scene program (used by the tests)."""
    clauses = [tuple(c) for c in json.loads(item["clauses"])]
    truths = [truth(program, c) for c in clauses]
    if item["task"].endswith("yn"):
        return "yes" if all(truths) else "no"
    if item["adversarial"] == "none" and not any(truths):
        return "C"
    if item["adversarial"] == "all" and all(truths):
        return "C"
    if sum(truths) != 1:
        raise AssertionError(f"ill-posed MC item: truths {truths}")
    return LETTERS[truths.index(True)]


def clause_targets(item: dict, program: dict, index: dict, max_text: int, compound: bool) -> list[int]:
    """v12 (``backbone.aux_clause``): per text column of ``encode(item["question"])``, the id of
    "yes" / "no" (the truth of the clause that ends at that column, from the scene program) or -100
    (no target). Clauses end
    before " and " / " ?" in yes/no items and before the next option letter / the end in multiple
    choice (the adversarial option carries none)."""
    from components.tricd.model import tokenize

    toks = tokenize(item["question"], compound)
    clauses = [tuple(c) for c in json.loads(item["clauses"])]
    if item["task"].endswith("yn"):
        body, start, cuts = toks[4:-1], 4, {"and"}
    else:
        body, start, cuts = toks[5:], 5, set(LETTERS)
    ends = []
    for j, t in enumerate(body):
        if t in cuts and j:
            ends.append(start + j - 1)
    ends.append(start + len(body) - 1)
    if len(ends) < len(clauses):
        raise AssertionError(f"{len(ends)} clause ends for {len(clauses)} clauses: {item['question']}")
    out = [-100] * max_text
    offset = max_text - (len(toks) + 1)
    for end, c in zip(ends, clauses):
        out[offset + end] = index["yes" if truth(program, c) else "no"]
    return out


def build_split(split: str, n_videos: int, qa_per_task: int, rng: np.random.Generator, *,
                frames: int, size: int, world: int, bias: float, biased_types,
                adversarial_rate: float) -> tuple[np.ndarray, list[dict], list[dict]]:
    videos = np.empty((n_videos, frames, size, size, 3), np.uint8)
    programs, items = [], []
    for v in range(n_videos):
        program = V.sample_scene(rng, frames, world)
        videos[v] = V.render(program, size)
        programs.append(program)
        for task in TASKS:
            for _ in range(qa_per_task):
                item = make_item(program, task, split, rng, bias=bias, biased_types=biased_types,
                                 adversarial_rate=adversarial_rate)
                if item is not None:
                    item.update(qa_id=f"{split}-{len(items)}", video=v, split=split,
                                compositional=task.startswith("c_"))
                    items.append(item)
    return videos, programs, items


# ---- stage -----------------------------------------------------------------------------
def build_benchmark_stage(cfg, ctx) -> None:
    import pandas as pd
    import torch

    from components.common.io import save_torch, write_json_atomic, write_table

    if cfg.paper.enabled:   # the OmniVCHall release from paper.data_root
        from components.tricd.paper_data import build_paper_benchmark

        return build_paper_benchmark(cfg, ctx)
    b = cfg.bench
    rng = np.random.default_rng(b.seed)
    sizes = {"pretrain": b.n_pretrain, "train": b.n_train, "val": b.n_val, "test": b.n_test}
    summary = {}
    for i, split in enumerate(SPLITS):
        per_task = b.qa_per_task_pretrain if split == "pretrain" else b.qa_per_task_eval
        videos, programs, items = build_split(
            split, sizes[split], per_task, rng, frames=b.frames, size=b.size, world=b.world,
            bias=b.bias, biased_types=b.biased_types, adversarial_rate=b.adversarial_rate)
        save_torch(ctx.out_dir / f"{split}_videos.pt", torch.from_numpy(videos))
        write_json_atomic(ctx.out_dir / f"{split}_programs.json", programs)
        df = pd.DataFrame(items)
        write_table(ctx.out_dir / f"{split}_qa.parquet", df)
        yn = df[df.task.str.endswith("yn")]
        mc = df[~df.task.str.endswith("yn")]
        summary[f"{split}_n_qa"] = len(df)
        summary[f"{split}_yes_rate"] = float((yn.answer == "yes").mean())
        summary[f"{split}_adv_answer_rate"] = float((mc[mc.adversarial != ""].answer == "C").mean())
        ctx.progress(i + 1, len(SPLITS), f"built {split}: {len(df)} QA")
    ctx.write_metrics(summary)
