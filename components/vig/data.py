"""Generated multimodal instruction data in which vision is uncertain and a language prior helps.

Each scene is a small, faint, colour-jittered square (the named object) on the left or right of a
dimmed crop of a bundled photo, plus a distractor bar of another colour. The object's noun is only
in the text; its colour follows the noun's "usual" colour with probability ``prior_prob``
(bias-aligned) and is another colour otherwise (bias-conflicting). The object's opacity is drawn
per scene from [0, ``contrast_max``], so some scenes barely show it: a model then has to combine
what it sees with the noun's prior, and on a blurred image the prior is all that is left. That is
the language bias VIG is meant to expose. Conversations are captions, colour / position VQA,
visually uninformative chit-chat (with an image) and text-only arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass
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
IMAGE_TOKEN = "<image>"       # LLaVA's placeholder, expanded to one id per visual token
KINDS = ("caption", "color", "position", "chit", "text")
CHIT = (("is this a picture ?", "yes , this is a picture ."),
        ("say hello .", "hello , how can i help ?"),
        ("please answer briefly .", "sure , i will be brief ."))
ALIGN_NOUN = "object"           # stage-1 captions name no noun with a prior
TEMPLATE_WORDS = ("describe the is and on it what color where ? . , a picture yes this say hello "
                  "how can i help please answer briefly sure will be brief plus").split()
VOCAB = list(SPECIALS) + sorted(set(TEMPLATE_WORDS) | set(COLORS) | set(PRIOR) | {ALIGN_NOUN} | set(POSITIONS)
                                | set(NUMBERS)) + [IMAGE_TOKEN]
WORD_ID = {w: i for i, w in enumerate(VOCAB)}
PAD, BOS, SEP, EOS = (WORD_ID[s] for s in SPECIALS)
IMAGE_ID = WORD_ID[IMAGE_TOKEN]   # the last id, as LLaVA-1.5 reserves it
GROUNDED_WORDS = set(COLORS) | set(POSITIONS)   # the words an image can tell


@dataclass(frozen=True)
class Look:
    """How hard the object is to see: the knobs calibrated on validation (CLAIMS.md)."""
    object_side: int = 3          # the named object: a filled square of this side (pixels)
    contrast_min: float = 0.0     # its opacity over the background is drawn from
    contrast_max: float = 0.5     # U(contrast_min, contrast_max)
    color_jitter: float = 40.0    # std of a per-object RGB offset (colours become confusable)
    distractor: bool = True       # a bar of another colour somewhere in the scene

    @classmethod
    def of(cls, data_cfg) -> "Look":
        return cls(object_side=data_cfg.object_side, contrast_min=data_cfg.contrast_min,
                   contrast_max=data_cfg.contrast_max,
                   color_jitter=data_cfg.color_jitter, distractor=data_cfg.distractor)


@dataclass(frozen=True)
class Scene:
    """Everything random about one image except the object's colour and side."""
    background: np.ndarray        # (H, W, 3) float
    row: int                      # object's top-left row
    col: int                      # column offset inside its half
    alpha: float                  # object opacity
    jitter: np.ndarray            # (3,) RGB offset of the object
    distractor: tuple | None      # (colour, row, col, alpha) of the bar, or None


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
    return 0.55 * photo[y:y + size, x:x + size]          # dimmed so a bright object can stand out


def draw_scene(rng: np.random.Generator, size: int, look: Look, color: str) -> Scene:
    """A random background, object box, opacity, colour jitter and distractor for ``color``."""
    side = look.object_side
    bg = background(rng, size)
    row, col = int(rng.integers(0, size - side + 1)), int(rng.integers(0, size // 2 - side + 1))
    alpha = float(rng.uniform(look.contrast_min, look.contrast_max))
    jitter = rng.normal(0.0, look.color_jitter, size=3)
    distractor = None
    if look.distractor:
        other = str(rng.choice([c for c in COLORS if c != color]))
        width = side + 2                                   # a 1-pixel bar: a different shape
        distractor = (other, int(rng.integers(0, size)), int(rng.integers(0, size - width + 1)),
                      float(rng.uniform(look.contrast_min, look.contrast_max)))
    return Scene(bg, row, col, alpha, jitter, distractor)


def render(scene: Scene, color: str, position: str, side: int) -> np.ndarray:
    """(3, H, W) uint8 image: the distractor bar, then the ``color`` square in the ``position`` half."""
    size = scene.background.shape[0]
    img = scene.background.copy()
    if scene.distractor is not None:
        other, d_row, d_col, d_alpha = scene.distractor
        _blend(img, d_row, d_row + 1, d_col, d_col + side + 2, np.asarray(COLORS[other], float), d_alpha)
    col = scene.col + (0 if position == "left" else size // 2)
    _blend(img, scene.row, scene.row + side, col, col + side,
           np.asarray(COLORS[color], float) + scene.jitter, scene.alpha)
    return np.clip(img, 0, 255).astype(np.uint8).transpose(2, 0, 1)


def _blend(img: np.ndarray, r0: int, r1: int, c0: int, c1: int, rgb: np.ndarray, alpha: float) -> None:
    img[r0:r1, c0:c1] = (1 - alpha) * img[r0:r1, c0:c1] + alpha * rgb


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


def make_split(rng, n: int, size: int, look: Look, prior_prob: float, kinds: list[str],
               weights: list[float], conflict_frac: float | None = None, align: bool = False) -> dict:
    """``n`` samples; with ``conflict_frac`` exactly that fraction is bias-conflicting; ``align``:
    stage-1 captions of an unnamed "object" with a uniformly drawn colour (no prior to learn)."""
    rows, images, tokens, sup, grd = [], [], [], [], []
    nouns = list(PRIOR)
    for i in range(n):
        kind = str(rng.choice(kinds, p=np.asarray(weights) / sum(weights)))
        noun = ALIGN_NOUN if align else str(rng.choice(nouns))
        if align:
            color = str(rng.choice(list(COLORS)))
        elif conflict_frac is None:
            color = draw_color(rng, noun, prior_prob)
        else:
            color = draw_color(rng, noun, 0.0 if i < round(conflict_frac * n) else 1.0)
        position = str(rng.choice(POSITIONS))
        prompt, answer = conversation(kind, noun, color, position, rng)
        has_image = kind != "text"
        scene = draw_scene(rng, size, look, color)
        img = render(scene, color, position, look.object_side)
        images.append(img if has_image else np.full_like(img, 128))  # text-only: a flat grey image
        ids, s, g = encode(prompt, answer, SEQ_LEN)
        tokens.append(ids), sup.append(s), grd.append(g)
        rows.append({"id": i, "kind": kind, "noun": noun, "color": color, "position": position,
                     "conflict": color != PRIOR.get(noun, color), "has_image": has_image, "alpha": scene.alpha,
                     "prompt": prompt, "answer": answer})
    return {"images": torch.from_numpy(np.stack(images)), "tokens": torch.tensor(tokens),
            "supervised": torch.tensor(sup), "grounded": torch.tensor(grd), "rows": rows}


def make_probes(rng, n: int, size: int, look: Look, prior_prob: float) -> dict:
    """Fixed caption with a matching, a partially matching (position swapped) and a conflicting
    (colour and position changed) image of the same scene (background, box, opacity, distractor)."""
    tokens, sup, grd, imgs, rows = [], [], [], {"match": [], "partial": [], "conflict": []}, []
    for i in range(n):
        noun, position = str(rng.choice(list(PRIOR))), str(rng.choice(POSITIONS))
        color = draw_color(rng, noun, prior_prob)
        other_pos = POSITIONS[1 - POSITIONS.index(position)]
        other_color = str(rng.choice([c for c in COLORS if c != color]))
        scene = draw_scene(rng, size, look, color)
        imgs["match"].append(render(scene, color, position, look.object_side))
        imgs["partial"].append(render(scene, color, other_pos, look.object_side))
        imgs["conflict"].append(render(scene, other_color, other_pos, look.object_side))
        prompt, answer = conversation("caption", noun, color, position, rng)
        ids, s, g = encode(prompt, answer, SEQ_LEN)
        tokens.append(ids), sup.append(s), grd.append(g)
        rows.append({"id": i, "noun": noun, "color": color, "position": position})
    out = {f"images_{k}": torch.from_numpy(np.stack(v)) for k, v in imgs.items()}
    out.update(tokens=torch.tensor(tokens), supervised=torch.tensor(sup), grounded=torch.tensor(grd),
               rows=rows)
    return out


SPLITS = ("train", "val", "test", "probes", "align")


def prepare_data_stage(cfg, ctx) -> None:
    """Train (the instruction mix), val and test (colour questions, half bias-conflicting; val is
    for calibration and the premise checks only), the VIG probes and the stage-1 alignment
    captions, each from its own random stream. Paper profile: the LLaVA-665K JSON (llava.py)."""
    from components.vig import llava

    if llava.is_paper(cfg):
        return llava.prepare_data_stage(cfg, ctx)
    d, look = cfg.data, Look.of(cfg.data)
    seed_everything(d.data_seed)
    rng = {name: np.random.default_rng([d.data_seed, i]) for i, name in enumerate(SPLITS)}
    colour_only = dict(kinds=["color"], weights=[1.0], conflict_frac=0.5)
    splits = {
        "train": make_split(rng["train"], d.n_train, d.image_size, look, d.prior_prob, list(d.mix),
                            list(d.mix.values())),
        "val": make_split(rng["val"], d.n_val, d.image_size, look, d.prior_prob, **colour_only),
        "test": make_split(rng["test"], d.n_test, d.image_size, look, d.prior_prob, **colour_only),
        "probes": make_probes(rng["probes"], d.n_probe, d.image_size, look, d.prior_prob),
        "align": make_split(rng["align"], d.n_align, d.image_size, look, d.prior_prob, ["caption"], [1.0],
                            align=True),
    }
    n_conflict = sum(r["conflict"] for r in splits["train"]["rows"] if r["has_image"])
    for name, split in splits.items():
        write_table(ctx.out_dir / f"{name}_samples.parquet", _columns(split.pop("rows")))
        save_torch(ctx.out_dir / f"{name}.pt", split)
    write_json_atomic(ctx.out_dir / "vocab.json", VOCAB)
    ctx.write_metrics({"n_train": d.n_train, "n_val": d.n_val, "n_test": d.n_test,
                       "vocab_size": len(VOCAB), "train_conflict_frac": n_conflict / d.n_train})


def _columns(rows: list[dict]) -> dict[str, list]:
    return {k: [r[k] for r in rows] for k in rows[0]}
