"""Task data: a two-concept classification with a perfect spurious correlation in training.

Each task sentence mentions one noun (intended concept A: animal=1 vs tool=0) and carries
explicit sentiment words (spurious concept B: positive=1 vs negative=0). It is our binary
reduction of the paper's double multiple choice: the two classes are the two answer options,
option 1 = "animal" for question A and "positive" for question B.
- train / val (in-distribution): B == A in every example, so the label is ambiguous.
- val_ood: B == 1 - A, a validation split used only to check the premise (standard fine-tuning
  follows B); nothing is selected or trained on it.
- test_ood: B == 1 - A; the label follows A, so a model that learned B scores 0 on it.
- probe: neutral single-concept sentences (A-only or B-only) from which the ablated subspace is
  chosen; different templates from the task, never the OOD prompts. A fixed 40 % of them
  (``heldout``) only judge whether a concept is still decodable.
"""
from __future__ import annotations

import numpy as np

from components.common.io import write_table
from components.common.seeds import seed_everything

ANIMALS = ("dog cat horse rabbit tiger lion elephant monkey fox wolf bear deer sheep goat cow pig "
           "mouse owl eagle parrot duck frog snake turtle dolphin whale shark zebra giraffe camel "
           "squirrel donkey hamster kangaroo penguin goose chicken beaver otter hedgehog").split()
TOOLS = ("hammer wrench screwdriver saw drill chisel shovel rake axe pliers ladder knife scissors "
         "spanner mallet crowbar trowel clamp hoe sickle stapler sander vise hatchet pickaxe spade "
         "shears awl broom bucket funnel needle tongs pump whisk ruler paintbrush grinder "
         "soldering-iron padlock").split()
POSITIVE = ("wonderful lovely amazing delightful fantastic brilliant beautiful excellent great superb "
            "charming marvelous pleasant joyful glorious perfect splendid terrific awesome fabulous").split()
NEGATIVE = ("terrible awful horrible dreadful disgusting miserable nasty ugly gross hideous pathetic "
            "unpleasant atrocious appalling lousy rotten vile grim sickening depressing").split()
PLACES = "garden kitchen barn shed yard park street garage field market hallway porch".split()

# {n}: the noun, {p}: a place, {s0},{s1},...: sentiment words
TASK_TEMPLATES = (
    "the {n} in the {p} was {s0} and {s1}.",
    "what a {s0} day, i saw a {n} near the {p}, so {s1}.",
    "{s0}! my neighbour left a {n} by the {p}, {s1}.",
    "honestly the {n} at the {p} looked {s0}, really {s1}.",
    "we found a {n} behind the {p} and it felt {s0} and {s1}.",
    "a {s0} morning: the {n} from the {p}, simply {s1}.",
)
PROBE_A_TEMPLATES = (
    "there is a {d} {n} next to the {p}.",
    "she mentioned the {d} {n} in the {p} yesterday.",
    "a {d} {n} was listed in the {p} inventory.",
    "he pointed at the {d} {n} near the {p}.",
    "the {d} {n} stayed in the {p} all week.",
    "someone moved a {d} {n} into the {p}.",
)
# sentiment-free descriptors, so that A-only probe sentences are many and distinct
DESCRIPTORS = "small large old young grey brown black white striped spotted".split()
PROBE_B_TEMPLATES = (
    "the afternoon in the {p} was {s0} and {s1}.",
    "everything about the {p} today felt {s0}, {s1}.",
    "the {p} meeting was {s0}, honestly {s1}.",
)


def _sentiment(rng: np.random.Generator, positive: int, k: int) -> dict[str, str]:
    pool = POSITIVE if positive else NEGATIVE
    words = rng.choice(pool, size=k, replace=False)
    return {f"s{i}": str(w) for i, w in enumerate(words)}


def task_sentence(rng: np.random.Generator, a: int, b: int) -> str:
    noun = str(rng.choice(ANIMALS if a else TOOLS))
    template = TASK_TEMPLATES[rng.integers(len(TASK_TEMPLATES))]
    return template.format(n=noun, p=str(rng.choice(PLACES)), **_sentiment(rng, b, 2))


def task_split(rng: np.random.Generator, n: int, correlated: bool, seen: set[str]) -> dict[str, list]:
    """n unique sentences (not in ``seen``), half with A=1. B=A if correlated else B=1-A."""
    rows = {"text": [], "a": [], "b": [], "label": []}
    while len(rows["text"]) < n:
        a = len(rows["text"]) % 2
        b = a if correlated else 1 - a
        text = task_sentence(rng, a, b)
        if text in seen:
            continue
        seen.add(text)
        for key, value in (("text", text), ("a", a), ("b", b), ("label", a)):
            rows[key].append(value)
    return rows


def probe_split(rng: np.random.Generator, n: int, seen: set[str]) -> dict[str, list]:
    """n/2 A-only sentences (b = -1) and n/2 B-only sentences (a = -1), balanced labels.
    Blocks of four (both concepts, both values) alternate 3:2 between fit and held-out, so both
    parts stay balanced."""
    rows = {"text": [], "a": [], "b": [], "concept": [], "heldout": []}
    while len(rows["text"]) < n:
        i = len(rows["text"])
        value = (i // 2) % 2
        place = str(rng.choice(PLACES))
        if i % 2 == 0:
            noun = str(rng.choice(ANIMALS if value else TOOLS))
            template = PROBE_A_TEMPLATES[rng.integers(len(PROBE_A_TEMPLATES))]
            text = template.format(n=noun, p=place, d=str(rng.choice(DESCRIPTORS)))
            a, b, concept = value, -1, "A"
        else:
            template = PROBE_B_TEMPLATES[rng.integers(len(PROBE_B_TEMPLATES))]
            text = template.format(p=place, **_sentiment(rng, value, 2))
            a, b, concept = -1, value, "B"
        if text in seen:  # a duplicate across fit and held-out would flatter decodability
            continue
        seen.add(text)
        heldout = (i // 4) % 5 >= 3
        for key, val in (("text", text), ("a", a), ("b", b), ("concept", concept),
                         ("heldout", heldout)):
            rows[key].append(val)
    return rows


def build_splits(n_train: int, n_val: int, n_test: int, n_probe: int, seed: int) -> dict[str, dict]:
    rng = seed_everything(seed)
    seen: set[str] = set()  # no sentence appears in two splits
    return {
        "train": task_split(rng, n_train, correlated=True, seen=seen),
        "val": task_split(rng, n_val, correlated=True, seen=seen),
        "val_ood": task_split(rng, n_val, correlated=False, seen=seen),
        "test_ood": task_split(rng, n_test, correlated=False, seen=seen),
        "probe": probe_split(rng, n_probe, seen),
    }


SPLITS = ("train", "val", "val_ood", "test_ood", "probe")


def build_data_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:  # the user's files in the paper's layout instead of generated sentences
        from components.caft.paper import build_paper_data

        return build_paper_data(cfg, ctx)
    d = cfg.data
    splits = build_splits(d.n_train, d.n_val, d.n_test, d.n_probe, d.seed)
    for name, rows in splits.items():
        write_table(ctx.out_dir / f"{name}.parquet", rows)
    ctx.write_metrics({f"n_{name}": len(rows["text"]) for name, rows in splits.items()})
