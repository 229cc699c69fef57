"""Generated multimodal instruction data with a language prior.

Each scene is one coloured square on the left or right of a dimmed background crop of a bundled
photo. The object's noun is only in the text; its colour follows the noun's "usual" colour with
probability ``prior_prob`` (bias-aligned) and is another colour otherwise (bias-conflicting), so a
model can answer most colour questions from the text alone — the language bias VIG is meant to
expose. Conversations are captions, colour / position VQA, visually uninformative chit-chat (with an
image) and text-only arithmetic.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from scipy.ndimage import gaussian_filter

from components.common.io import save_torch, write_json_atomic, write_table
from components.common.seeds import seed_everything

COLORS = {"red": (230, 30, 30), "green": (30, 200, 40), "blue": (30, 70, 235),
          "yellow": (240, 220, 20), "white": (250, 250, 250), "purple": (150, 40, 200)}
PRIOR = {"tomato": "red", "grass": "green", "sky": "blue", "banana": "yellow", "snow": "white",
         "grape": "purple"}
POSITIONS = ("left", "right")
NUMBERS = [str(i) for i in range(19)]
SPECIALS = ("<pad>", "<bos>", "<sep>", "<eos>")
KINDS = ("caption", "color", "position", "chit", "text")
CHIT = (("is this a picture ?", "yes , this is a picture ."),
        ("say hello .", "hello , how can i help ?"),
        ("please answer briefly .", "sure , i will be brief ."))
TEMPLATE_WORDS = ("describe the is and on it what color where ? . , a picture yes this say hello "
                  "how can i help please answer briefly sure will be brief plus").split()
VOCAB = list(SPECIALS) + sorted(set(TEMPLATE_WORDS) | set(COLORS) | set(PRIOR) | set(POSITIONS)
                                | set(NUMBERS))
WORD_ID = {w: i for i, w in enumerate(VOCAB)}
PAD, BOS, SEP, EOS = (WORD_ID[s] for s in SPECIALS)
GROUNDED_WORDS = set(COLORS) | set(POSITIONS)   # the words an image can tell


# ---------------------------------------------------------------- images
@lru_cache(maxsize=None)
def _photos(size: int) -> tuple[np.ndarray, ...]:
    """Bundled photos, downscaled so that a ``size`` crop shows a recognisable texture."""
    from skimage import data as skd
    from skimage.transform import resize
    from sklearn.datasets import load_sample_image

    raw = [skd.astronaut(), skd.coffee(), skd.chelsea(), skd.rocket(),
           load_sample_image("china.jpg"), load_sample_image("flower.jpg")]
    out = []
    for img in raw:
        h, w = img.shape[:2]
        scale = 3 * size / min(h, w)
        small = resize(img, (int(h * scale), int(w * scale)), anti_aliasing=True)
        out.append((small * 255).astype(np.float32))
    return tuple(out)


def background(rng: np.random.Generator, size: int) -> np.ndarray:
    photo = _photos(size)[rng.integers(len(_photos(size)))]
    y, x = rng.integers(photo.shape[0] - size + 1), rng.integers(photo.shape[1] - size + 1)
    return 0.55 * photo[y:y + size, x:x + size]          # dimmed so the object stands out


def object_box(rng: np.random.Generator, size: int) -> tuple[int, int]:
    """(row, column offset within its half) of the object's top-left corner."""
    side = size // 3
    return int(rng.integers(0, size - side + 1)), int(rng.integers(0, size // 2 - side + 1))


def render(bg: np.ndarray, color: str, position: str, box: tuple[int, int]) -> np.ndarray:
    """(3, H, W) uint8 image: the background with a ``color`` square in the ``position`` half."""
    size = bg.shape[0]
    side, (row, col) = size // 3, box
    col += 0 if position == "left" else size // 2
    img = bg.copy()
    img[row:row + side, col:col + side] = COLORS[color]
    return np.clip(img, 0, 255).astype(np.uint8).transpose(2, 0, 1)


def blur(images: torch.Tensor, sigma_frac: float) -> torch.Tensor:
    """The no-vision control: a Gaussian blur (same shape, so prompt length is unchanged)."""
    sigma = sigma_frac * images.shape[-1]
    if sigma <= 0:
        return images.clone()
    arr = images.float().numpy()
    out = gaussian_filter(arr, sigma=(0, 0, sigma, sigma), mode="reflect")
    return torch.from_numpy(out).to(images.dtype if images.is_floating_point() else torch.float32)


# ---------------------------------------------------------------- conversations
def draw_color(rng: np.random.Generator, noun: str, prior_prob: float) -> str:
    if rng.random() < prior_prob:
        return PRIOR[noun]
    return str(rng.choice([c for c in COLORS if c != PRIOR[noun]]))


def conversation(kind: str, noun: str, color: str, position: str, rng) -> tuple[str, str]:
    if kind == "caption":
        return f"describe the {noun} .", f"the {noun} is {color} and on the {position} ."
    if kind == "color":
        return f"what color is the {noun} ?", f"it is {color} ."
    if kind == "position":
        return f"where is the {noun} ?", f"it is on the {position} ."
    if kind == "chit":
        return CHIT[rng.integers(len(CHIT))]
    a, b = int(rng.integers(10)), int(rng.integers(10))
    return f"what is {a} plus {b} ?", f"it is {a + b} ."


def encode(prompt: str, answer: str, length: int) -> tuple[list[int], list[bool], list[bool]]:
    """Token ids, which ids are supervised answer tokens (answer + <eos>) and which are grounded."""
    p, a = prompt.split(), answer.split()
    ids = [BOS] + [WORD_ID[w] for w in p] + [SEP] + [WORD_ID[w] for w in a] + [EOS]
    supervised = [False] * (len(p) + 2) + [True] * (len(a) + 1)
    grounded = [False] * (len(p) + 2) + [w in GROUNDED_WORDS for w in a] + [False]
    if len(ids) > length:
        raise ValueError(f"conversation longer than {length} tokens: {prompt!r} {answer!r}")
    pad = length - len(ids)
    return ids + [PAD] * pad, supervised + [False] * pad, grounded + [False] * pad


SEQ_LEN = 16   # longest conversation (caption) is 15 tokens with <bos>/<sep>/<eos>


def make_split(rng, n: int, size: int, prior_prob: float, kinds: list[str],
               weights: list[float], conflict_frac: float | None = None) -> dict:
    """``n`` samples; with ``conflict_frac`` exactly that fraction is bias-conflicting."""
    rows, images, tokens, sup, grd = [], [], [], [], []
    nouns = list(PRIOR)
    for i in range(n):
        kind = str(rng.choice(kinds, p=np.asarray(weights) / sum(weights)))
        noun = str(rng.choice(nouns))
        if conflict_frac is None:
            color = draw_color(rng, noun, prior_prob)
        else:
            color = draw_color(rng, noun, 0.0 if i < round(conflict_frac * n) else 1.0)
        position = str(rng.choice(POSITIONS))
        prompt, answer = conversation(kind, noun, color, position, rng)
        has_image = kind != "text"
        img = render(background(rng, size), color, position, object_box(rng, size))
        images.append(img if has_image else np.full_like(img, 128))  # text-only: a flat grey image
        ids, s, g = encode(prompt, answer, SEQ_LEN)
        tokens.append(ids), sup.append(s), grd.append(g)
        rows.append({"id": i, "kind": kind, "noun": noun, "color": color, "position": position,
                     "conflict": color != PRIOR[noun], "has_image": has_image,
                     "prompt": prompt, "answer": answer})
    return {"images": torch.from_numpy(np.stack(images)), "tokens": torch.tensor(tokens),
            "supervised": torch.tensor(sup), "grounded": torch.tensor(grd), "rows": rows}


def make_probes(rng, n: int, size: int, prior_prob: float) -> dict:
    """Fixed caption with a matching, a partially matching (position swapped) and a conflicting
    (colour and position changed) image on the same background."""
    tokens, sup, grd, imgs, rows = [], [], [], {"match": [], "partial": [], "conflict": []}, []
    for i in range(n):
        noun, position = str(rng.choice(list(PRIOR))), str(rng.choice(POSITIONS))
        color = draw_color(rng, noun, prior_prob)
        other_pos = POSITIONS[1 - POSITIONS.index(position)]
        other_color = str(rng.choice([c for c in COLORS if c != color]))
        bg, box = background(rng, size), object_box(rng, size)
        imgs["match"].append(render(bg, color, position, box))
        imgs["partial"].append(render(bg, color, other_pos, box))
        imgs["conflict"].append(render(bg, other_color, other_pos, box))
        prompt, answer = conversation("caption", noun, color, position, rng)
        ids, s, g = encode(prompt, answer, SEQ_LEN)
        tokens.append(ids), sup.append(s), grd.append(g)
        rows.append({"id": i, "noun": noun, "color": color, "position": position})
    out = {f"images_{k}": torch.from_numpy(np.stack(v)) for k, v in imgs.items()}
    out.update(tokens=torch.tensor(tokens), supervised=torch.tensor(sup), grounded=torch.tensor(grd),
               rows=rows)
    return out


def prepare_data_stage(cfg, ctx) -> None:
    d = cfg.data
    rng = seed_everything(d.data_seed)
    kinds, weights = list(d.mix), list(d.mix.values())
    train = make_split(rng, d.n_train, d.image_size, d.prior_prob, kinds, weights)
    test = make_split(rng, d.n_test, d.image_size, d.prior_prob, ["color"], [1.0], conflict_frac=0.5)
    probes = make_probes(rng, d.n_probe, d.image_size, d.prior_prob)
    n_conflict = sum(r["conflict"] for r in train["rows"] if r["has_image"])
    for name, split in (("train", train), ("test", test), ("probes", probes)):
        write_table(ctx.out_dir / f"{name}_samples.parquet", _columns(split.pop("rows")))
        save_torch(ctx.out_dir / f"{name}.pt", split)
    write_json_atomic(ctx.out_dir / "vocab.json", VOCAB)
    ctx.write_metrics({"n_train": d.n_train, "n_test": d.n_test, "vocab_size": len(VOCAB),
                       "train_conflict_frac": n_conflict / d.n_train})


def _columns(rows: list[dict]) -> dict[str, list]:
    return {k: [r[k] for r in rows] for k in rows[0]}
