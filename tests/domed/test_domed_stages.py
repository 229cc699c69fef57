"""Stage functions run directly with LocalContext: data layout, the shortcut's construction
and test-domain isolation."""
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from components.common.context import LocalContext
from components.common.io import load_torch, read_json, read_table, write_table
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


def declared(cfg, stage):
    """The config as the runtime hands it to ``stage``: undeclared params raise."""
    return DeclaredParams(cfg, METHOD.stage(stage).params, stage)


@pytest.mark.parametrize("benchmark", data.BENCHMARKS)
def test_domains_are_disjoint_chunks_with_in_out_splits(built, cfg, benchmark):
    arrays = data.load_domains(built, benchmark)
    assert arrays["x"].shape[1:] == (1, 16, 16) and len(arrays["y"]) == 1797
    counts = np.bincount(arrays["domain"])
    assert len(counts) == 6 and counts.min() >= 299
    for d in range(6):
        out_frac = np.mean(arrays["split"][arrays["domain"] == d] == "out")
        assert out_frac == pytest.approx(0.2, abs=0.01)
    # rebuilding with the same data seed is bit-identical
    again = data.build_benchmark(benchmark, cfg.data, cfg.data.data_seed)
    np.testing.assert_array_equal(again["x"].reshape(arrays["x"].shape), arrays["x"])


def test_shortcut_is_label_coded_domain_specific_and_absent_from_the_test_domain(built, cfg):
    arrays = data.load_domains(built, "spurious_digits")
    codes = data.shortcut_pixels(6, 16)
    assert len(set(codes.ravel())) == 60                               # no pixel shared by two codes
    ring = set(data.ring_pixels(16))
    assert set(codes.ravel()) <= ring and (arrays["x"].reshape(len(arrays["y"]), -1)[:, list(ring)] == 0).all()
    agree = codes[arrays["domain"], arrays["y"]] == arrays["shortcut"]
    assert agree.mean() == pytest.approx(cfg.data.spurious_p, abs=0.03)
    for d in range(6):                                                  # each domain uses its own ten pixels
        assert set(arrays["shortcut"][arrays["domain"] == d]) <= set(codes[d])
    source = data.source_split(arrays, TEST_ENV, "in")
    flat = source.x.reshape(len(source.y), -1)
    assert (flat[np.arange(len(source.y)), arrays["shortcut"][source.index]] == 1.0).all()
    assert ((flat[:, list(ring)] > 0).sum(axis=1) == 1).all()            # exactly one lit ring pixel
    test = data.test_split(arrays, TEST_ENV)
    assert (test.x.reshape(len(test.y), -1)[:, list(ring)] == 0).all()  # the test domain has none


def test_source_split_never_returns_the_test_domain(built):
    arrays = data.load_domains(built, "spurious_digits")
    for split in ("in", "out", None):
        assert TEST_ENV not in set(data.source_split(arrays, TEST_ENV, split).domain)
    with pytest.raises(ValueError):
        data.source_split(arrays, TEST_ENV, "in", domains=[TEST_ENV])


def _poison_test_domain(built, root):
    """A copy of the domains tables whose test-domain images are NaN: any training or selection
    step that touches them produces non-finite weights."""
    root.mkdir(parents=True)
    for benchmark in data.BENCHMARKS:
        table = read_table(built / data.table_name(benchmark)).to_pandas()
        test_rows = table["domain"] == TEST_ENV
        width = len(table["x"].iloc[0])
        table.loc[test_rows, "x"] = pd.Series([np.full(width, np.nan, dtype=np.float32)] * int(test_rows.sum()),
                                              index=table.index[test_rows])
        write_table(root / data.table_name(benchmark), table)
        shutil.copy(built / data.names_file(benchmark), root / data.names_file(benchmark))
    return root


def test_no_test_domain_data_reaches_training_or_selection(built, cfg, tmp_path):
    poisoned = _poison_test_domain(built, tmp_path / "build_domains")
    item = {"benchmark": "spurious_digits", "seed": 0}
    allocation.allocate_stage(declared(cfg, "allocate"), LocalContext(out_dir=tmp_path / "allocate",
                                                                      inputs={"build_domains": poisoned}))
    base = {"build_domains": poisoned, "allocate": tmp_path / "allocate"}
    ctxs = {}
    for name, func, extra in [
        ("train_teachers", train.train_teachers_stage, {}),
        ("train_erm", train.train_erm_stage, {}),
        ("teacher_predict", train.teacher_predict_stage,
         {"train_teachers": tmp_path / "train_teachers", "train_erm": tmp_path / "train_erm"}),   # item_deps
        ("train_student", train.train_student_stage, {"teacher_predict": tmp_path / "teacher_predict"}),
    ]:
        ctxs[name] = LocalContext(out_dir=tmp_path / name, inputs={**base, **extra}, item=item)
        func(declared(cfg, name), ctxs[name])

    students = load_torch(tmp_path / "train_student" / train.STUDENTS)
    assert set(students) == set(cfg.student.variants)
    for variant, folds in students.items():
        assert all(torch.isfinite(p).all() for p in folds[TEST_ENV].values()), variant
    teachers = load_torch(tmp_path / "train_teachers" / train.TEACHERS)[TEST_ENV]
    ensemble = load_torch(tmp_path / "train_erm" / train.ENSEMBLE)[TEST_ENV]
    for state in teachers["states"] + ensemble["states"]:
        assert all(torch.isfinite(p).all() for p in state.values())
    assert np.isfinite(ensemble["temperature"])

    pred = load_torch(tmp_path / "teacher_predict" / train.PREDICTIONS)[TEST_ENV]
    assert TEST_ENV not in set(pred["domain"].tolist())
    assert torch.isfinite(pred["unseen"]["logits"]).all() and torch.isfinite(pred["seen"]["logits"]).all()
    # the stored mask is exactly "teacher m never trained on this row's domain"
    taus = pred["unseen"]["teachers"]
    for d, row in zip(pred["domain"].tolist(), pred["unseen"]["mask"].tolist()):
        assert row == [d not in tau for tau in taus]
    diagnostics = read_json(tmp_path / "teacher_predict" / train.DIAGNOSTICS)[str(TEST_ENV)]
    assert {"premise_acc_ratio", "premise_overconf_gap", "teacher_acc_seen_val"} <= set(diagnostics)
    assert all(np.isfinite(v) for v in diagnostics.values())


def test_teacher_diagnostics_separate_own_domain_validation_from_unseen_rows():
    # two teachers, four rows: rows 0-1 from teacher 0's domain (row 1 validation), rows 2-3 unseen by it
    # each teacher is wrong on its own training row and right on its own validation row
    logits = torch.tensor([[[0.0, 5.0], [0.0, 5.0]], [[5.0, 0.0], [5.0, 0.0]],
                           [[5.0, 0.0], [0.0, 5.0]], [[5.0, 0.0], [0.0, 5.0]]])
    labels = torch.tensor([0, 0, 0, 1])
    mask = torch.tensor([[False, True], [False, True], [True, False], [True, False]])
    is_val = torch.tensor([False, True, False, True])
    out = train.teacher_diagnostics(logits, mask, labels, is_val)
    assert out["teacher_acc_seen_train"] == 0.0 and out["teacher_acc_seen_val"] == 1.0
    assert out["teacher_acc_unseen"] == pytest.approx(0.5)    # teacher 1 on rows 0-1, teacher 0 on 2-3
    conf = float(torch.softmax(torch.tensor([5.0, 0.0]), 0)[0])
    assert out["teacher_overconf_unseen"] == pytest.approx(conf - 0.5)
    assert out["premise_acc_ratio"] == pytest.approx(0.5)
    assert out["premise_overconf_gap"] == pytest.approx((conf - 0.5) - (conf - 1.0))


def test_digit_noise_leaves_the_shortcut_ring_dark(cfg):
    noisy_cfg = cfg.data.model_copy(update={"spurious_noise": 0.3})
    clean, noisy = (data.build_benchmark("spurious_digits", d, 0) for d in (cfg.data, noisy_cfg))
    ring = data.ring_pixels(16)
    assert (noisy["x"][:, ring] == 0).all()
    assert not np.allclose(clean["x"], noisy["x"]) and (noisy["x"] >= 0).all() and (noisy["x"] <= 1).all()
    np.testing.assert_array_equal(clean["shortcut"], noisy["shortcut"])


def test_premise_ratio_is_undefined_not_a_crash_when_a_teacher_misses_all_its_validation_rows():
    # paper-shape runs train random tiny ResNets for a few steps: 0 % own-domain validation
    # accuracy happened, and the ratio divided by zero (teacher_predict failed)
    logits = torch.tensor([[[0.0, 5.0]], [[5.0, 0.0]]])      # one teacher: its val row wrong, unseen row right
    labels = torch.tensor([0, 0])
    mask, is_val = torch.tensor([[False], [True]]), torch.tensor([True, False])
    out = train.teacher_diagnostics(logits, mask, labels, is_val)
    assert out["teacher_acc_seen_val"] == 0.0 and out["teacher_acc_unseen"] == 1.0
    assert np.isnan(out["premise_acc_ratio"])


def test_domain_batches_take_the_same_number_of_rows_from_every_domain():
    domains = np.array([0] * 7 + [2] * 5 + [3] * 9)
    stream = train.domain_batches(domains, per_domain=3, seed=0)
    batches = [next(stream) for _ in range(6)]
    for batch in batches:
        assert np.bincount(domains[batch.numpy()], minlength=4).tolist() == [3, 0, 3, 3]
    again = train.domain_batches(domains, per_domain=3, seed=0)
    assert all(torch.equal(b, next(again)) for b in batches)                 # seeded
    with pytest.raises(ValueError, match="domain 2 has 5 training rows"):
        next(train.domain_batches(domains, per_domain=6, seed=0))
