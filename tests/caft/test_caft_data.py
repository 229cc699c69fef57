"""The generated task: correlations per split, no overlap, probe independence."""
import numpy as np

from components.caft.data import ANIMALS, POSITIVE, TOOLS, build_splits


def test_splits_have_the_intended_correlations():
    s = build_splits(200, 50, 80, 40, seed=0)
    for name in ("train", "val"):
        assert s[name]["a"] == s[name]["b"] == s[name]["label"]   # fully ambiguous
    test = s["test_ood"]
    assert all(b == 1 - a for a, b in zip(test["a"], test["b"]))  # decorrelated (anti)
    assert test["label"] == test["a"]
    assert np.mean(s["train"]["a"]) == 0.5 and np.mean(test["a"]) == 0.5


def test_no_sentence_in_two_splits_and_probe_is_single_concept():
    s = build_splits(200, 50, 80, 40, seed=1)
    texts = [set(s[k]["text"]) for k in ("train", "val", "test_ood", "probe")]
    assert sum(map(len, texts)) == len(set().union(*texts))
    for text, a, b in zip(s["probe"]["text"], s["probe"]["a"], s["probe"]["b"]):
        words = set(text.replace(",", " ").replace(".", " ").split())
        assert (a == -1) != (b == -1)
        if a >= 0:
            assert words & set(ANIMALS if a else TOOLS) and not words & set(POSITIVE)
        else:
            assert not words & (set(ANIMALS) | set(TOOLS))


def test_generation_is_deterministic():
    assert build_splits(50, 10, 10, 10, seed=3) == build_splits(50, 10, 10, 10, seed=3)
