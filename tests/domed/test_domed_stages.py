"""Stage functions run directly with LocalContext: data layout and test-domain isolation."""
import numpy as np
import pandas as pd
import pytest
import torch

from components.common.context import LocalContext
from components.common.io import load_torch, read_table, write_table
from components.domed import allocation, data, train
from components.domed.config import DomedConfig
from flows.domed import METHOD
from flows.runtime.dag import DeclaredParams

TEST_ENV = 2
TINY = {"seeds": [0], "data": {"test_envs": [TEST_ENV]},
        "optim": {"teacher_steps": 4, "steps": 4, "eval_every": 2, "batch_size": 16},
        "baselines": {"n_ensemble": 2}}


@pytest.fixture(scope="module")
def cfg():
    return DomedConfig.for_profile("smoke", TINY)


@pytest.fixture(scope="module")
def built(tmp_path_factory, cfg):
    out = tmp_path_factory.mktemp("domed") / "build_domains"
    data.build_domains_stage(declared(cfg, "build_domains"), LocalContext(out_dir=out))
    return out


def test_domains_are_disjoint_rotations_with_in_out_splits(built, cfg):
    arrays = data.load_domains(built)
    assert arrays["x"].shape[1:] == (1, 16, 16) and len(arrays["y"]) == 1797
    counts = np.bincount(arrays["domain"])
    assert len(counts) == 6 and counts.min() >= 299
    for d in range(6):
        out_frac = np.mean(arrays["split"][arrays["domain"] == d] == "out")
        assert out_frac == pytest.approx(0.2, abs=0.01)
    # rebuilding with the same data seed is bit-identical
    again = data.rotated_digits(cfg.data.angles, 16, 0.2, cfg.data.data_seed)
    np.testing.assert_array_equal(again["x"].reshape(arrays["x"].shape), arrays["x"])


def test_source_split_never_returns_the_test_domain(built):
    arrays = data.load_domains(built)
    for split in ("in", "out"):
        assert TEST_ENV not in set(data.source_split(arrays, TEST_ENV, split).domain)
    with pytest.raises(ValueError):
        data.source_split(arrays, TEST_ENV, "in", domains=[TEST_ENV])


def declared(cfg, stage):
    """The config as the runtime hands it to ``stage``: undeclared params raise."""
    return DeclaredParams(cfg, METHOD.stage(stage).params, stage)


def _poison_test_domain(built, root):
    """A copy of the domains table whose test-domain images are NaN: any training or selection
    step that touches them produces non-finite weights."""
    table = read_table(built / data.TABLE).to_pandas()
    test_rows = table["domain"] == TEST_ENV
    width = len(table["x"].iloc[0])
    table.loc[test_rows, "x"] = pd.Series([np.full(width, np.nan, dtype=np.float32)] * int(test_rows.sum()),
                                          index=table.index[test_rows])
    write_table(root / data.TABLE, table)
    return root


def test_no_test_domain_data_reaches_training_or_selection(built, cfg, tmp_path):
    poisoned = _poison_test_domain(built, tmp_path / "build_domains")
    item = {"test_env": TEST_ENV, "seed": 0}
    allocation.allocate_stage(declared(cfg, "allocate"), LocalContext(out_dir=tmp_path / "allocate"))
    base = {"build_domains": poisoned, "allocate": tmp_path / "allocate"}
    fold = f"{TEST_ENV}-0"
    ctxs = {}
    for name, func, extra in [
        ("train_teachers", train.train_teachers_stage, {}),
        ("train_erm", train.train_erm_stage, {}),
        ("teacher_predict", train.teacher_predict_stage,
         {"train_teachers": {fold: tmp_path / "train_teachers"}, "train_erm": {fold: tmp_path / "train_erm"}}),
    ]:
        ctxs[name] = LocalContext(out_dir=tmp_path / name, inputs={**base, **extra}, item=item)
        func(declared(cfg, name), ctxs[name])
    for variant in cfg.student.variants:
        ctx = LocalContext(out_dir=tmp_path / f"student_{variant}", item={**item, "variant": variant},
                           inputs={**base, "teacher_predict": {fold: tmp_path / "teacher_predict"}})
        train.train_student_stage(declared(cfg, "train_student"), ctx)
        state = load_torch(tmp_path / f"student_{variant}" / train.STUDENT)
        assert all(torch.isfinite(p).all() for p in state.values()), variant

    for path in (tmp_path / "train_teachers" / train.TEACHERS, tmp_path / "train_erm" / train.ENSEMBLE):
        for state in load_torch(path)["states"]:
            assert all(torch.isfinite(p).all() for p in state.values())
    assert np.isfinite(load_torch(tmp_path / "train_erm" / train.ENSEMBLE)["temperature"])

    pred = load_torch(tmp_path / "teacher_predict" / train.PREDICTIONS)
    assert TEST_ENV not in set(pred["domain"].tolist())
    assert torch.isfinite(pred["unseen"]["logits"]).all() and torch.isfinite(pred["seen"]["logits"]).all()
    # the stored mask is exactly "teacher m never trained on this row's domain"
    taus = pred["unseen"]["teachers"]
    for d, row in zip(pred["domain"].tolist(), pred["unseen"]["mask"].tolist()):
        assert row == [d not in tau for tau in taus]
    assert set(ctxs["teacher_predict"].summary) >= {"teacher_conf_seen", "teacher_conf_unseen"}
