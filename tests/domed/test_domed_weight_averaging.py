"""EoA's moving average and DiWA's uniform weight average (the weight-averaging baselines), and
the minibatch stream on splits smaller than a batch."""
import threading

import numpy as np
import pytest
import torch

from components.domed import train
from components.domed.config import DomedConfig
from components.domed.data import Split


def test_moving_average_is_the_mean_of_the_weights_from_its_start_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    average = train.MovingAverage(model, start=3)
    optimizer.register_step_post_hook(average.update)
    after = []                                        # weights after every step
    for _ in range(7):
        optimizer.zero_grad()
        model(torch.randn(5, 3)).square().sum().backward()
        optimizer.step()
        after.append(model.weight.detach().clone())
    # EoA's count: from update 3 on, the mean of the weights after steps 2..t
    torch.testing.assert_close(average.model.weight, torch.stack(after[1:]).mean(0))
    assert not torch.equal(average.model.weight, model.weight)


def test_moving_average_copies_the_live_weights_before_its_start():
    model = torch.nn.Linear(2, 2)
    average = train.MovingAverage(model, start=5)
    with torch.no_grad():
        model.weight.add_(1.0)
    average.update()
    torch.testing.assert_close(average.model.weight, model.weight)


def test_average_states_is_the_uniform_mean_and_keeps_integer_buffers():
    a = {"w": torch.tensor([1.0, 3.0]), "n": torch.tensor(4)}
    b = {"w": torch.tensor([3.0, 5.0]), "n": torch.tensor(9)}
    out = train.average_states([a, b])
    torch.testing.assert_close(out["w"], torch.tensor([2.0, 4.0]))
    assert out["n"].item() == 4 and not out["n"].is_floating_point()


def _digits_split(n, seed):
    rng = np.random.default_rng(seed)
    return Split(rng.random((n, 1, 16, 16), dtype=np.float32), rng.integers(0, 10, n), np.zeros(n, np.int64),
                 np.arange(n))


def test_tracking_the_moving_average_leaves_the_trained_run_unchanged():
    """EoA rides on the ERM members' runs: the member must come out bit-identical."""
    cfg = DomedConfig.for_profile("smoke", {"optim": {"eval_every": 3, "batch_size": 8}})
    train_split, val = _digits_split(40, 0), _digits_split(20, 1)
    loss = train.cross_entropy_loss(cfg, train_split, 0)
    plain, plain_acc = train.train_model(cfg, train_split, val, loss, steps=6, seed=7)
    member, acc, average, average_acc = train.train_model(cfg, train_split, val, loss, steps=6, seed=7,
                                                          average_from=2)
    assert acc == plain_acc and 0.0 <= average_acc <= 1.0
    for key, value in plain.state_dict().items():
        assert torch.equal(value, member.state_dict()[key]), key
    assert any(not torch.equal(v, average.state_dict()[k]) for k, v in member.state_dict().items())


def test_weight_averaged_baselines_follow_the_config():
    states = [{"w": torch.tensor([0.0])}, {"w": torch.tensor([2.0])}]
    small = DomedConfig.for_profile("small", {})
    assert small.baselines.eoa and not small.baselines.diwa      # DiWA needs a shared init
    assert set(train.weight_averaged(small, states, states)) == {"eoa_states"}
    paper = DomedConfig.for_profile("paper", {})
    out = train.weight_averaged(paper, states, states)
    assert out["diwa_state"]["w"].item() == 1.0 and paper.optim.schedule == "constant"
    assert small.optim.schedule == "cosine"


def _first_batch_within(stream, seconds):
    """next(stream) in a daemon thread: None if it did not return in time (the old stream spun)."""
    got = []
    worker = threading.Thread(target=lambda: got.append(next(stream)), daemon=True)
    worker.start()
    worker.join(seconds)
    return got[0] if got else None


def test_batch_stream_on_a_split_smaller_than_a_batch_yields_all_its_rows():
    # bug: with n < batch_size every chunk was short and skipped, so next() never returned
    batch = _first_batch_within(train.batch_stream(3, 8, seed=0), seconds=2.0)
    assert batch is not None, "batch_stream never yielded on a 3-row split"
    assert sorted(batch.tolist()) == [0, 1, 2]
    stream = train.batch_stream(10, 4, seed=0)               # the usual case is unchanged: full batches
    assert all(len(next(stream)) == 4 for _ in range(5))
    with pytest.raises(ValueError, match="empty split"):
        next(train.batch_stream(0, 4, seed=0))


# ---- (T, beta) selection on training-domain validation (paper profile) -----------------

def test_search_grid_is_the_fixed_values_in_small_and_the_notes_grid_in_paper():
    small = DomedConfig.for_profile("small", {}).student
    for name, spec in small.specs.items():
        assert train.search_grid(small, spec) == [{"temperature": 2.0, "beta": spec.dirichlet_weight}], name
    paper = DomedConfig.for_profile("paper", {}).student
    grids = {name: train.search_grid(paper, spec) for name, spec in paper.specs.items()}
    assert len(grids["domed"]) == 9 and {c["beta"] for c in grids["domed"]} == {0.01, 0.05, 0.1}
    assert [c["beta"] for c in grids["domed_beta0"]] == [0.0] * 3      # the ablation stays beta = 0
    assert [c["beta"] for c in grids["end2_only"]] == [1.0] * 3
    assert {c["temperature"] for c in grids["kd_seen"]} == {1.0, 2.0, 4.0}


def test_select_student_keeps_the_best_validation_accuracy_first_on_ties(monkeypatch):
    cfg = DomedConfig.for_profile("paper", {})
    accs = {(1.0, 0.01): 0.5, (2.0, 0.05): 0.9, (4.0, 0.1): 0.9}
    seen = []

    def fake_train_student(cfg, arrays, fold, test_env, variant, seed, benchmark, ctx, temperature, beta, tag):
        seen.append(tag)
        return f"model T{temperature} b{beta}", accs.get((temperature, beta), 0.1)

    monkeypatch.setattr(train, "train_student", fake_train_student)
    model, acc, choice = train.select_student(cfg, {}, {}, 0, "domed", 0, "PACS", None)
    assert (model, acc, choice) == ("model T2.0 b0.05", 0.9, {"temperature": 2.0, "beta": 0.05})
    assert len(seen) == 9 and len(set(seen)) == 9                     # every candidate logs under its own name
