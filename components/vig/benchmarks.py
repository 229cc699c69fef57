"""The paper's benchmarks that can be scored offline, read from their published layouts.

- POPE (object hallucination, yes/no): ``coco_pope_{random,popular,adversarial}.json``, JSON lines of
  ``{question_id, image, text, label}``, images in COCO ``val2014/``. Accuracy, precision, recall,
  F1 (positive = yes), yes-ratio.
- MMBench (multiple choice): the dev TSV (``index, question, hint, A..D, answer, category, image``
  with base64 images; an image cell holding another row's index re-uses that row's image).
  Accuracy on the given option order and CircularEval accuracy (right under every rotation of the
  options, as LLaVA-1.5's ``--all-rounds``).
- CV-Bench (multiple choice): ``test.jsonl`` of ``{idx, type, task, image, question, choices,
  answer: "(C)", source}`` with images relative to its folder. Accuracy per source; 2D = mean of
  ADE20K and COCO, 3D = Omni3D, overall = mean of 2D and 3D (CV-Bench's own summary).
- DocVQA (open answers): ``val_v1.0.json`` = ``{data: [{questionId, question, image, answers}]}``,
  images relative to its folder (``documents/*.png``). ANLS (threshold 0.5).
- CHAIR (caption hallucination): COCO ``instances_val2014.json`` (images, annotations, categories)
  and ``val2014/``; a detailed caption per image, object words matched to COCO categories through
  the synonym table below. CHAIR_s, CHAIR_i, recall of the annotated objects.

LLaVA-W, MM-Vet and MMHal are scored by a GPT-4 judge and are not wired (no judge offline).
Yes/no and multiple-choice answers are read from the next-token logits of the answer words or
option letters (deterministic; LLaVA-1.5's scripts generate and parse the first word instead);
DocVQA answers and CHAIR captions are greedy generations. Every reader fails with
``DatasetError`` naming the file, the record and the field that is wrong.
"""
from __future__ import annotations

import base64
import binascii
import csv
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from components.common.readers import DatasetError, read_jsonl

SHORT = "\nAnswer the question using a single word or phrase."          # LLaVA-1.5's VQA suffix
LETTER = "\nAnswer with the option's letter from the given choices directly."
DETAIL = "Please describe this image in detail."
LETTERS = "ABCDEF"


@dataclass(frozen=True)
class Question:
    qid: str
    image: str | bytes          # a path, or encoded image bytes (MMBench)
    prompt: str                 # the user's message (the image goes before it)
    answer: object              # "yes"/"no", an option letter, a list of strings, a set of objects
    options: tuple[str, ...] = ()
    group: str = ""             # category / source for grouped scores


@dataclass
class Suite:
    name: str
    kind: str                   # "yesno" | "choice" | "open" | "caption"
    questions: list[Question]
    score: Callable[[list[Question], list], dict] = field(repr=False)


def _image_file(path: Path, where: str) -> str:
    if not path.is_file():
        raise DatasetError(f"{where}: field 'image' names a missing file {path}")
    return str(path)


def _choice_prompt(question: str, options: list[str]) -> str:
    return question + "".join(f"\n{LETTERS[i]}. {o}" for i, o in enumerate(options)) + LETTER


# ---------------------------------------------------------------- POPE
def read_pope(path: str, image_root: str) -> list[Question]:
    rows = read_jsonl(path, {"image": str, "text": str, "label": str})
    out = []
    for i, row in enumerate(rows, 1):
        label = row["label"].strip().lower()
        if label not in ("yes", "no"):
            raise DatasetError(f"{path}: record {i}: field 'label' must be yes or no, got {row['label']!r}")
        image = _image_file(Path(image_root) / row["image"], f"{path}: record {i}")
        out.append(Question(str(row.get("question_id", i)), image, row["text"] + SHORT, label))
    return out


def pope_metrics(pred_yes: np.ndarray, label_yes: np.ndarray) -> dict:
    """POPE's accuracy, precision, recall, F1 (positive = yes) and yes-ratio, in %."""
    tp = float((pred_yes & label_yes).sum())
    precision = tp / max(float(pred_yes.sum()), 1.0)
    recall = tp / max(float(label_yes.sum()), 1.0)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    return {"acc": 100 * float((pred_yes == label_yes).mean()), "precision": 100 * precision,
            "recall": 100 * recall, "f1": 100 * f1, "yes_ratio": 100 * float(pred_yes.mean())}


def score_pope(questions, preds) -> dict:
    return pope_metrics(np.array([p == "yes" for p in preds]), np.array([q.answer == "yes" for q in questions]))


# ---------------------------------------------------------------- MMBench
MMBENCH_COLUMNS = ("index", "question", "answer", "A", "B", "image")


def _missing(value) -> bool:
    return value is None or value.strip().lower() in ("", "nan", "none")


def _decode_image(cell: str, where: str) -> bytes:
    try:
        return base64.b64decode(cell, validate=True)
    except (binascii.Error, ValueError):
        raise DatasetError(f"{where}: field 'image' is not base64") from None


def read_mmbench(path: str) -> list[Question]:
    """Every rotation of every row's options: qid ``<index>/<rotation>``."""
    csv.field_size_limit(sys.maxsize)          # base64 images are long cells
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t")
        missing = [c for c in MMBENCH_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DatasetError(f"{path}: missing column(s) {missing} (has {reader.fieldnames})")
        rows = list(reader)
    images = {r["index"]: r["image"] for r in rows}
    out = []
    for i, row in enumerate(rows, 2):           # line 1 is the header
        where = f"{path}: line {i}"
        options = [row[c] for c in "ABCD" if c in row and not _missing(row[c])]
        letters = LETTERS[:len(options)]
        answer = (row["answer"] or "").strip()
        if answer not in letters:
            raise DatasetError(f"{where}: field 'answer' must be one of {list(letters)}, got {answer!r}")
        cell = row["image"]
        cell = images.get(cell, cell) if cell.isdigit() and len(cell) < 32 else cell   # a reference
        image = _decode_image(cell, where)
        question = row["question"] if _missing(row.get("hint")) else f"{row['hint']}\n{row['question']}"
        target = letters.index(answer)
        for k in range(len(options)):           # rotation k: option j moves to slot (j - k) mod n
            rotated = options[k:] + options[:k]
            out.append(Question(f"{row['index']}/{k}", image, _choice_prompt(question, rotated),
                                letters[(target - k) % len(options)], tuple(letters), row.get("category", "")))
    return out


def score_mmbench(questions, preds) -> dict:
    right: dict[str, list[bool]] = {}
    first = []
    for q, p in zip(questions, preds):
        index, rotation = q.qid.split("/")
        right.setdefault(index, []).append(p == q.answer)
        if rotation == "0":
            first.append(p == q.answer)
    return {"acc": 100 * float(np.mean(first)),
            "circular_acc": 100 * float(np.mean([all(v) for v in right.values()]))}


# ---------------------------------------------------------------- CV-Bench
def read_cvbench(path: str) -> list[Question]:
    rows = read_jsonl(path, {"image": str, "question": str, "choices": list, "answer": str})
    root = Path(path).parent
    out = []
    for i, row in enumerate(rows, 1):
        where = f"{path}: record {i}"
        letters = LETTERS[:len(row["choices"])]
        answer = row["answer"].strip().strip("()")
        if not row["choices"] or answer not in letters:
            raise DatasetError(f"{where}: field 'answer' must be one of "
                               f"{[f'({c})' for c in letters]}, got {row['answer']!r}")
        source = row.get("source") or ("Omni3D" if row.get("type") == "3D" else "2D")
        out.append(Question(str(row.get("idx", i)), _image_file(root / row["image"], where),
                            _choice_prompt(row["question"], [str(c) for c in row["choices"]]),
                            answer, tuple(letters), source))
    return out


def score_cvbench(questions, preds) -> dict:
    by_source: dict[str, list[bool]] = {}
    for q, p in zip(questions, preds):
        by_source.setdefault(q.group, []).append(p == q.answer)
    acc = {s: 100 * float(np.mean(v)) for s, v in by_source.items()}
    out = {f"acc_{re.sub(r'[^0-9a-z]+', '', s.lower())}": v for s, v in sorted(acc.items())}
    two_d = [acc[s] for s in acc if s != "Omni3D"]
    parts = ([float(np.mean(two_d))] if two_d else []) + ([acc["Omni3D"]] if "Omni3D" in acc else [])
    if two_d:
        out["acc_2d"] = float(np.mean(two_d))
    if "Omni3D" in acc:
        out["acc_3d"] = acc["Omni3D"]
    out["acc"] = float(np.mean(parts))
    return out


# ---------------------------------------------------------------- DocVQA
def read_docvqa(path: str, image_root: str = "") -> list[Question]:
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path}: not valid JSON ({err.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DatasetError(f"{path}: expected an object with a list field 'data'")
    root = Path(image_root) if image_root else Path(path).parent
    out = []
    for i, row in enumerate(data["data"], 1):
        where = f"{path}: data[{i - 1}]"
        for name, kind in (("question", str), ("image", str), ("answers", list)):
            if not isinstance(row.get(name), kind):
                hint = " (the test split has no answers: use val)" if name == "answers" else ""
                raise DatasetError(f"{where}: field {name!r} missing or not a {kind.__name__}{hint}")
        out.append(Question(str(row.get("questionId", i)), _image_file(root / row["image"], where),
                            row["question"] + SHORT, [str(a) for a in row["answers"]]))
    return out


def levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(prediction: str, answers: list[str], threshold: float = 0.5) -> float:
    """Average Normalized Levenshtein Similarity of one answer: the best over the references of
    1 - NL, or 0 where NL >= threshold (DocVQA's metric; case and spacing ignored)."""
    def norm(s):
        return " ".join(s.strip().lower().split())

    best = 0.0
    for ref in answers:
        p, r = norm(prediction), norm(ref)
        nl = levenshtein(p, r) / max(len(p), len(r), 1)
        best = max(best, 1.0 - nl if nl < threshold else 0.0)
    return best


def score_docvqa(questions, preds) -> dict:
    return {"anls": 100 * float(np.mean([anls(p, q.answer) for q, p in zip(questions, preds)]))}


# ---------------------------------------------------------------- CHAIR
# COCO category -> phrases that name it (singular; plurals are folded by `singular`). Ours, shorter
# than CHAIR's published synonym list: numbers are comparable across our arms, not to the paper's.
SYNONYMS = {
    "person": "person, man, woman, boy, girl, child, kid, people, men, women, player, guy, lady, baby, skier, surfer, rider",
    "bicycle": "bicycle, bike", "car": "car", "motorcycle": "motorcycle, motorbike", "airplane": "airplane, plane, jet",
    "bus": "bus", "train": "train", "truck": "truck", "boat": "boat, ship", "traffic light": "traffic light",
    "fire hydrant": "fire hydrant, hydrant", "stop sign": "stop sign", "parking meter": "parking meter",
    "bench": "bench", "bird": "bird", "cat": "cat, kitten", "dog": "dog, puppy", "horse": "horse",
    "sheep": "sheep, lamb", "cow": "cow, cattle", "elephant": "elephant", "bear": "bear", "zebra": "zebra",
    "giraffe": "giraffe", "backpack": "backpack", "umbrella": "umbrella", "handbag": "handbag, purse",
    "tie": "tie", "suitcase": "suitcase, luggage", "frisbee": "frisbee", "skis": "ski, skis",
    "snowboard": "snowboard", "sports ball": "ball", "kite": "kite", "baseball bat": "baseball bat, bat",
    "baseball glove": "baseball glove, glove", "skateboard": "skateboard", "surfboard": "surfboard",
    "tennis racket": "tennis racket, racket", "bottle": "bottle", "wine glass": "wine glass", "cup": "cup, mug",
    "fork": "fork", "knife": "knife", "spoon": "spoon", "bowl": "bowl", "banana": "banana", "apple": "apple",
    "sandwich": "sandwich", "orange": "orange", "broccoli": "broccoli", "carrot": "carrot",
    "hot dog": "hot dog", "pizza": "pizza", "donut": "donut, doughnut", "cake": "cake", "chair": "chair",
    "couch": "couch, sofa", "potted plant": "potted plant, houseplant", "bed": "bed",
    "dining table": "dining table, table", "toilet": "toilet", "tv": "tv, television", "laptop": "laptop",
    "mouse": "mouse", "remote": "remote", "keyboard": "keyboard", "cell phone": "cell phone, phone, cellphone",
    "microwave": "microwave", "oven": "oven", "toaster": "toaster", "sink": "sink",
    "refrigerator": "refrigerator, fridge", "book": "book", "clock": "clock", "vase": "vase",
    "scissors": "scissors", "teddy bear": "teddy bear", "hair drier": "hair drier, hair dryer",
    "toothbrush": "toothbrush",
}
IRREGULAR = {"men": "man", "women": "woman", "people": "person", "children": "child", "knives": "knife",
             "skis": "ski", "scissors": "scissors", "glasses": "glass", "buses": "bus", "benches": "bench",
             "sandwiches": "sandwich", "couches": "couch", "boxes": "box", "dishes": "dish",
             "skies": "sky"}


def _phrases() -> dict[tuple[str, ...], str]:
    return {tuple(phrase.split()): category for category, phrases in SYNONYMS.items()
            for phrase in [category] + phrases.split(", ")}


PHRASES = _phrases()
PHRASE_WORDS = {w for phrase in PHRASES for w in phrase}


def singular(word: str) -> str:
    if word in IRREGULAR:
        return IRREGULAR[word]
    for suffix, repl in (("ies", "y"), ("s", ""), ("es", "")):
        if word.endswith(suffix) and word[:-len(suffix)] + repl in PHRASE_WORDS:
            return word[:-len(suffix)] + repl
    return word


def mentioned_objects(caption: str) -> list[str]:
    """COCO categories a caption names, in order, longest phrase first at each word."""
    words = [singular(w) for w in re.findall(r"[a-z]+", caption.lower())]
    found, i = [], 0
    while i < len(words):
        for n in (2, 1):
            category = PHRASES.get(tuple(words[i:i + n]))
            if category:
                found.append(category)
                i += n
                break
        else:
            i += 1
    return found


def read_coco_chair(path: str, image_root: str, n_images: int, seed: int = 0) -> list[Question]:
    """``n_images`` annotated val2014 images drawn with ``seed`` (0 = all), their object sets."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path}: not valid JSON ({err.msg})") from None
    for name in ("images", "annotations", "categories"):
        if not isinstance(data.get(name) if isinstance(data, dict) else None, list):
            raise DatasetError(f"{path}: missing list field {name!r} (a COCO instances file)")
    try:
        names = {c["id"]: c["name"] for c in data["categories"]}
        files = {im["id"]: im["file_name"] for im in data["images"]}
        objects: dict[int, set] = {}
        for a in data["annotations"]:
            objects.setdefault(a["image_id"], set()).add(names[a["category_id"]])
    except KeyError as err:
        raise DatasetError(f"{path}: a record lacks field {err.args[0]!r}") from None
    unknown = sorted(set(names.values()) - set(SYNONYMS))
    if unknown:
        raise DatasetError(f"{path}: field 'categories' has names outside COCO's 80: {unknown[:5]}")
    ids = sorted(i for i in objects if i in files)
    if n_images and n_images < len(ids):
        ids = sorted(np.random.default_rng(seed).choice(ids, size=n_images, replace=False).tolist())
    return [Question(str(i), _image_file(Path(image_root) / files[i], f"{path}: image {i}"), DETAIL,
                     frozenset(objects[i])) for i in ids]


def score_chair(questions, captions) -> dict:
    mentions, hallucinated, captions_bad, covered, truth = 0, 0, 0, 0, 0
    for q, caption in zip(questions, captions):
        said = mentioned_objects(caption)
        wrong = [o for o in said if o not in q.answer]
        mentions, hallucinated = mentions + len(said), hallucinated + len(wrong)
        captions_bad += bool(wrong)
        covered, truth = covered + len(set(said) & q.answer), truth + len(q.answer)
    # named chair_s / chair_i once prefixed with the suite's name
    return {"s": 100 * captions_bad / max(len(questions), 1), "i": 100 * hallucinated / max(mentions, 1),
            "recall": 100 * covered / max(truth, 1),
            "words": float(np.mean([len(c.split()) for c in captions])) if captions else 0.0}


# ---------------------------------------------------------------- loading from the config
def load_suite(cfg, name: str) -> Suite:
    p = cfg.paper
    if name == "pope":
        suite = Suite("pope", "yesno", read_pope(p.pope_jsonl, p.coco_val2014), score_pope)
    elif name == "mmbench":
        suite = Suite("mmbench", "choice", read_mmbench(p.mmbench_tsv), score_mmbench)
    elif name == "cvbench":
        suite = Suite("cvbench", "choice", read_cvbench(p.cvbench_jsonl), score_cvbench)
    elif name == "docvqa":
        suite = Suite("docvqa", "open", read_docvqa(p.docvqa_json), score_docvqa)
    elif name == "chair":
        suite = Suite("chair", "caption", read_coco_chair(p.coco_instances, p.coco_val2014, p.chair_images), score_chair)
    else:
        raise ValueError(f"paper.benchmarks: unknown benchmark {name!r} (pope, mmbench, cvbench, docvqa, chair)")
    if p.max_eval:
        suite.questions = suite.questions[:p.max_eval]
    return suite


def load_all(cfg) -> list[Suite]:
    return [load_suite(cfg, name) for name in cfg.paper.benchmarks]


# ---------------------------------------------------------------- running a model on a suite
class Runner:
    """One LLaVA (an arm's adapter on the checkpoint) answering benchmark questions."""

    def __init__(self, model, tok, device, cfg):
        from components.vig import llava

        self.model, self.tok, self.device, self.cfg = model.eval(), tok, device, cfg
        self.norm, self.pad = llava.image_norm(cfg.paper.model_path), llava.pads_to_square(cfg)
        self.size = llava.image_size(model)
        self.image_at = len(llava.prompt_prefix(tok))

    def images(self, questions) -> torch.Tensor:
        from components.vig.llava import load_images

        return load_images([q.image for q in questions], self.size, *self.norm, self.pad)

    def run(self, suite: Suite) -> tuple[dict, dict]:
        """Scores ``<suite>_<metric>_<view>`` (views: image, and blurred for yes/no and choice
        questions) and the answers table (one row per question)."""
        answers = {"qid": [q.qid for q in suite.questions], "answer": [str(q.answer) for q in suite.questions]}
        views = ("image", "blur") if suite.kind in ("yesno", "choice") else ("image",)
        scores = {}
        for view in views:
            preds = self.predict(suite, view == "blur")
            answers[f"pred_{view}"] = [str(p) for p in preds]
            scores.update({f"{suite.name}_{k}_{view}": v for k, v in suite.score(suite.questions, preds).items()})
        return scores, answers

    def predict(self, suite: Suite, blurred: bool) -> list:
        out, bs = [], self.cfg.paper.batch_size
        for s in range(0, len(suite.questions), bs):
            chunk = suite.questions[s:s + bs]
            images = self.images(chunk)
            if blurred:
                from components.vig.data import blur

                images = blur(images, self.cfg.vig.blur_sigma_frac)
            if suite.kind in ("yesno", "choice"):
                out += self.pick(chunk, images, suite.kind)
            else:
                limit = self.cfg.paper.caption_tokens if suite.kind == "caption" else self.cfg.paper.max_new_tokens
                out += self.generate(chunk, images, limit)
        return out

    def prompts(self, chunk) -> list[list[int]]:
        from components.vig.llava import question_ids

        return [question_ids(self.tok, q.prompt) for q in chunk]

    @torch.no_grad()
    def pick(self, chunk, images, kind: str) -> list[str]:
        """The answer word / option letter whose first token has the highest next-token logit."""
        from components.vig.model import text_logits

        prompts = self.prompts(chunk)
        tokens = torch.full((len(chunk), max(map(len, prompts)) + 1), self.tok.pad_token_id, dtype=torch.long)
        for i, ids in enumerate(prompts):
            tokens[i, :len(ids)] = torch.tensor(ids)
        logits = text_logits(self.model, images.to(self.device), tokens.to(self.device), self.image_at).float().cpu()
        slot = logits[torch.arange(len(chunk)), torch.tensor([len(ids) - 1 for ids in prompts])]
        out = []
        for row, q in zip(slot, chunk):
            words = ("yes", "no") if kind == "yesno" else q.options
            ids = first_token_ids(self.tok, [w.capitalize() if kind == "yesno" else w for w in words])
            out.append(words[int(row[ids].argmax())])
        return out

    @torch.no_grad()
    def generate(self, chunk, images, max_new_tokens: int) -> list[str]:
        """Greedy answers; prompts left-padded, the image tokens expanded as LLaVA's processor does."""
        from components.vig.model import n_image_tokens, pixel_values

        n, image_id = n_image_tokens(self.model), self.model.config.image_token_index
        prompts = [ids[:self.image_at] + [image_id] * n + ids[self.image_at:] for ids in self.prompts(chunk)]
        width = max(map(len, prompts))
        input_ids = torch.full((len(chunk), width), self.tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for i, ids in enumerate(prompts):
            input_ids[i, width - len(ids):], mask[i, width - len(ids):] = torch.tensor(ids), 1
        out = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                                  pixel_values=pixel_values(images).to(self.device), do_sample=False,
                                  max_new_tokens=max_new_tokens, pad_token_id=self.tok.pad_token_id,
                                  eos_token_id=self.tok.eos_token_id)
        return [t.strip() for t in self.tok.batch_decode(out[:, width:].cpu(), skip_special_tokens=True)]


def first_token_ids(tok, words) -> list[int]:
    ids = [tok(w, add_special_tokens=False).input_ids[0] for w in words]
    if len(set(ids)) != len(ids):
        raise ValueError(f"the tokenizer gives {list(words)} clashing first tokens {ids}")
    return ids
