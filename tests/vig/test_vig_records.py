"""vig's saved splits and score / selection records load back under weights_only=True."""
import numpy as np
import torch

from components.common.context import LocalContext
from components.common.io import load_torch, save_torch
from components.vig.config import VigConfig
from components.vig.data import prepare_data_stage
from components.vig.score import select_tokens


def test_prepared_splits_round_trip(tmp_path):
    cfg = VigConfig.for_profile("smoke", {"data": {"n_train": 24, "n_test": 8, "n_probe": 4}})
    prepare_data_stage(cfg, LocalContext(out_dir=tmp_path))
    for name, n in (("train", 24), ("test", 8), ("probes", 4)):
        split = load_torch(tmp_path / f"{name}.pt")
        assert all(isinstance(v, torch.Tensor) and len(v) == n for v in split.values())
        assert split["tokens"].dtype == torch.int64 and split["supervised"].dtype == torch.bool


def test_selection_records_round_trip(tmp_path):
    gen = torch.Generator().manual_seed(0)
    d, answer = torch.randn(6, 5, generator=gen), (torch.rand(6, 5, generator=gen) > 0.3).float()
    vig = d.mean(1).numpy()
    weights, tau, keep = select_tokens(d, answer, vig, np.array([True] * 4 + [False] * 2), 50.0)
    save_torch(tmp_path / "vig.pt", {"d": d, "sample_vig": vig})
    save_torch(tmp_path / "selection.pt", {"weights": weights, "tau": tau, "keep": keep})
    scores, selection = load_torch(tmp_path / "vig.pt"), load_torch(tmp_path / "selection.pt")
    assert scores["sample_vig"].dtype == np.float32 and np.array_equal(scores["sample_vig"], vig)
    assert torch.equal(selection["weights"], weights) and selection["tau"] == tau
    assert selection["keep"].dtype == bool and np.array_equal(selection["keep"], keep)
