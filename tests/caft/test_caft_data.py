"""The generated task: correlations per split, no overlap, probe independence."""
import numpy as np

from components.caft.data import ANIMALS, NEGATIVE, POSITIVE, TOOLS, build_splits


def test_splits_have_the_intended_correlations():
    s = build_splits(200, 50, 80, 40, seed=0)
    for name in ("train", "val"):
        assert s[name]["a"] == s[name]["b"] == s[name]["label"]   # fully ambiguous
    for name in ("val_ood", "test_ood"):
        split = s[name]
        assert all(b == 1 - a for a, b in zip(split["a"], split["b"]))  # decorrelated (anti)
        assert split["label"] == split["a"]
    assert np.mean(s["train"]["a"]) == 0.5 and np.mean(s["test_ood"]["a"]) == 0.5


def test_no_sentence_in_two_splits_and_probe_is_single_concept():
    s = build_splits(200, 50, 80, 400, seed=1)
    texts = [s[k]["text"] for k in ("train", "val", "val_ood", "test_ood", "probe")]
    assert sum(map(len, texts)) == len(set().union(*map(set, texts)))
    for text, a, b in zip(s["probe"]["text"], s["probe"]["a"], s["probe"]["b"]):
        words = set(text.replace(",", " ").replace(".", " ").split())
        assert (a == -1) != (b == -1)
        if a >= 0:
            assert words & set(ANIMALS if a else TOOLS) and not words & set(POSITIVE + NEGATIVE)
        else:
            assert not words & (set(ANIMALS) | set(TOOLS))


def test_probe_has_no_duplicates_at_the_small_size():
    # the old generator drew 3 A templates x 40 nouns x 12 places and repeated sentences, so
    # held-out probes duplicated fit probes and flattered decodability
    probe = build_splits(10, 10, 10, 3000, seed=1234)["probe"]
    assert len(set(probe["text"])) == 3000


def test_heldout_part_is_balanced_in_concept_and_value():
    probe = build_splits(10, 10, 10, 1000, seed=0)["probe"]
    held = np.array(probe["heldout"])
    assert held.mean() == 0.4
    for part in (held, ~held):
        for concept, key in (("A", "a"), ("B", "b")):
            on = part & (np.array(probe["concept"]) == concept)
            assert np.array(probe[key])[on].mean() == 0.5


def test_generation_is_deterministic():
    assert build_splits(50, 10, 10, 10, seed=3) == build_splits(50, 10, 10, 10, seed=3)
