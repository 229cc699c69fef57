"""Stage-level invariants with LocalContext: selection reads only the probe set, variants keep
the same k, the verdict logic, the config profiles."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from components.caft.config import CaftConfig
from components.caft.evaluate import judge
from components.caft.interpret import interpret_stage, select
from components.caft.minilm import encode_lower
from components.common.minilm import HIDDEN, tokenize
from components.caft.train import variant_directions
from components.common.context import LocalContext
from components.common.io import read_json, save_torch

RULE = SimpleNamespace(min_abs_corr_spurious=0.3, max_intended_ratio=0.5)


def test_selection_rule():
    rng = np.random.default_rng(0)
    a = np.r_[rng.integers(0, 2, 100), -np.ones(100, int)]
    b = np.r_[-np.ones(100, int), rng.integers(0, 2, 100)]
    noise = rng.normal(size=200)
    label_a, label_b = np.where(a >= 0, a, 0), np.where(b >= 0, b, 0)
    scores = np.stack([label_b * 3 + noise * 0.3,                  # pure B  -> kept
                       label_a * 3 + noise * 0.3,                  # pure A  -> dropped
                       (label_a + label_b) * 3 + noise * 0.3,      # both    -> dropped
                       noise], axis=1)                             # neither -> dropped
    selected, records = select({4: scores}, a, b, RULE)
    assert selected == {"4": [0]}
    assert records[0]["r_spurious"] > 0.9 and abs(records[0]["r_intended"]) < 0.3


def test_interpret_never_reads_the_ood_test_set(tmp_path):
    texts = ["there is a dog next to the barn.", "there is a saw next to the barn.",
             "the park meeting was lovely, great.", "the park meeting was awful, grim."] * 3
    ids, mask = tokenize(texts, 16)
    probe = {"h": encode_lower(ids, mask, upto=2).half(), "mask": mask.bool(), "text": texts,
             "a": torch.tensor([1, 0, -1, -1] * 3), "b": torch.tensor([-1, -1, 1, 0] * 3)}
    save_torch(tmp_path / "cache" / "cache.pt", {"probe": probe})  # no test_ood, no train
    pcs = torch.linalg.qr(torch.randn(HIDDEN, 3))[0].T
    save_torch(tmp_path / "dirs" / "directions.pt", {5: {"pcs": pcs}})
    cfg = CaftConfig.for_profile("smoke")
    ctx = LocalContext(out_dir=tmp_path / "out", item={"seed": 0},
                       inputs={"cache_lower": tmp_path / "cache", "find_directions": {"0": tmp_path / "dirs"}})
    interpret_stage(cfg, ctx)
    assert set(read_json(ctx.out_dir / "selected.json")) == {"5"}
    assert len(read_json(ctx.out_dir / "displays.json")) == 3
    assert ctx.summary["k_selected"] == len(read_json(ctx.out_dir / "selected.json")["5"])


def test_controls_use_the_same_k_per_layer():
    directions = {4: {"pcs": torch.eye(HIDDEN)[:10]}, 5: {"pcs": torch.eye(HIDDEN)[10:20]}}
    selected = {"4": [2, 7], "5": []}
    for variant in ("caft", "random", "top_pc"):
        out = variant_directions(variant, directions, selected, seed=0)
        assert {k: v.shape[0] for k, v in out.items()} == {4: 2}
    torch.testing.assert_close(variant_directions("caft", directions, selected, 0)[4],
                               directions[4]["pcs"][[2, 7]])
    with pytest.raises(ValueError):
        variant_directions("bogus", directions, selected, 0)


def test_verdict():
    crit = CaftConfig().criteria
    base = [{"id_acc": 1.0, "ood_intended_acc": 0.1}] * 3
    good = {"caft": [{"id_acc": 0.99, "ood_intended_acc": 0.6}] * 3,
            "random": [{"id_acc": 1.0, "ood_intended_acc": 0.2}] * 3}
    assert all(judge(base, good, crit).values())
    bad = {"caft": [{"id_acc": 0.9, "ood_intended_acc": 0.2}] * 3,
           "random": [{"id_acc": 1.0, "ood_intended_acc": 0.2}] * 3}
    verdict = judge(base, bad, crit)
    assert verdict["precondition_baseline_follows_spurious"]
    assert not verdict["ood_gain"] and not verdict["id_kept"] and not verdict["random_gains_less_than_half"]


def test_profiles_and_paper_preflight():
    assert CaftConfig.for_profile("smoke").seeds == [0]
    assert CaftConfig.for_profile("small").seeds == [0, 1, 2]
    CaftConfig.for_profile("small").preflight()
    with pytest.raises(FileNotFoundError, match="paper.model_path"):
        CaftConfig.for_profile("paper").preflight()
