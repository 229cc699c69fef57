"""GPU declarations: per-profile counts, Ray options, and the local executor's device slots
(whole devices for n >= 1 GPUs, shared ones for fractions, a worker that sees only its own)."""
from __future__ import annotations

import threading
import time

import pytest

from flows.runtime import workers
from flows.runtime.dag import Resources, Stage
from flows.runtime.runner import Instance


@pytest.fixture(autouse=True)
def _fresh_slots():
    workers.reset_gpu_slots()
    yield
    workers.reset_gpu_slots()


def test_num_gpus_per_profile():
    res = Resources(num_cpus=1, num_gpus={"paper": 1})
    assert res.gpus("paper") == 1.0
    assert res.gpus("small") == 0.0 and res.gpus("smoke") == 0.0
    assert Resources(num_gpus=0.5).gpus("small") == 0.5


def test_ray_options_use_the_profile_s_gpus(monkeypatch):
    from flows.runtime import prefect_flow

    seen = {}
    monkeypatch.setattr("prefect_ray.context.remote_options", lambda **kw: seen.update(kw) or None)
    inst = Instance(Stage("train", "m:f", resources=Resources(num_gpus={"paper": 2})), None, "a")
    prefect_flow._resource_options("ray", inst, "small")
    assert seen["num_gpus"] == 0.0
    prefect_flow._resource_options("ray", inst, "paper")
    assert seen["num_gpus"] == 2.0


def test_cpu_stage_and_no_visible_gpu_run_without_a_device():
    with workers.gpu_slot(0, count=lambda: 4) as device:
        assert device is None
    with workers.gpu_slot(1, count=lambda: 0) as device:
        assert device is None


def hold(num_gpus: float, visible: int, name: str, order: list, seconds: float = 0.3) -> threading.Thread:
    def stage() -> None:
        with workers.gpu_slot(num_gpus, count=lambda: visible) as devices:
            order.append((name, "start", tuple(devices)))
            time.sleep(seconds)
            order.append((name, "end", tuple(devices)))
    thread = threading.Thread(target=stage)
    thread.start()
    return thread


def started_after_an_end(order: list, name: str) -> bool:
    start = next(i for i, o in enumerate(order) if o[:2] == (name, "start"))
    return any(o[1] == "end" for o in order[:start])


def test_gpu_stages_take_one_device_each_and_wait_when_all_are_taken():
    order: list = []
    threads = [hold(1, 2, f"s{i}", order) for i in range(3)]
    for t in threads:
        t.join()
    starts = [o for o in order if o[1] == "start"]
    assert {d for _, _, d in starts} == {(0,), (1,)}
    assert started_after_an_end(order, starts[2][0])   # the third waited for a free device


def test_a_two_gpu_stage_holds_two_whole_devices():
    """Regression: every GPU stage used to reserve one device, whatever it declared."""
    order: list = []
    first = hold(2, 2, "two", order)
    time.sleep(0.1)
    second = hold(1, 2, "one", order)
    for t in (first, second):
        t.join()
    assert order[0] == ("two", "start", (0, 1))
    assert started_after_an_end(order, "one")


def test_fractional_gpu_stages_share_a_device():
    order: list = []
    threads = [hold(0.5, 1, f"h{i}", order) for i in range(3)]
    for t in threads:
        t.join()
    starts = [o for o in order if o[1] == "start"]
    assert {d for _, _, d in starts} == {(0,)}
    assert not started_after_an_end(order, starts[1][0])   # two halves ran side by side
    assert started_after_an_end(order, starts[2][0])       # the third half waited


def test_more_gpus_than_visible_fail_with_the_counts():
    with pytest.raises(workers.StageError, match=r"declares 4 GPU\(s\) but 2 are visible"):
        with workers.gpu_slot(4, count=lambda: 2):
            pass


def test_a_gpu_instance_runs_in_a_worker_that_sees_only_its_devices(tmp_path, monkeypatch):
    from flows.runtime import prefect_flow
    from flows.runtime.testing import make_project

    project = make_project(tmp_path / "proj", ["toy_flow"])
    monkeypatch.setenv("TOY_REPORT_ENV", "CUDA_VISIBLE_DEVICES")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(workers, "_visible_gpus", lambda: 3)
    params = {"data": {"n": 3}, "seeds": [0, 1]}
    seen = {}
    with workers.pool(1):
        for num_gpus in (0, 2):
            record = prefect_flow._run_stage(str(project.root), "toy_flow", "make_data", None,
                                             params, None, num_gpus)
            seen[num_gpus] = record["summary"]["env"]
    assert seen == {0: "", 2: "0,1"}


def test_stage_code_may_start_processes_of_its_own(tmp_path, monkeypatch):
    """Regression: stage workers were daemonic, so a stage starting a process (a DataLoader
    with num_workers > 0) failed with 'daemonic processes are not allowed to have children'."""
    from flows.runtime import prefect_flow
    from flows.runtime.testing import make_project

    project = make_project(tmp_path / "proj", ["toy_flow"])
    monkeypatch.setenv("TOY_CHILD_ON", "make_data")
    with workers.pool(1):
        record = prefect_flow._run_stage(str(project.root), "toy_flow", "make_data", None,
                                         {"data": {"n": 3}, "seeds": [0, 1]}, None)
    assert record["summary"]["n"] == 3
