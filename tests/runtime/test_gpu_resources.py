"""GPU declarations: per-profile counts, Ray options, one GPU stage per device under threads."""
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


def test_gpu_stages_take_one_device_each_and_wait_when_all_are_taken():
    held, order = [], []

    def stage(name: str) -> None:
        with workers.gpu_slot(1, count=lambda: 2) as device:
            held.append(device)
            order.append((name, "start", device))
            time.sleep(0.3)
            order.append((name, "end", device))
            held.remove(device)

    threads = [threading.Thread(target=stage, args=(f"s{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    starts = [o for o in order if o[1] == "start"]
    assert {d for _, _, d in starts} == {0, 1}
    # the third stage started only after one of the first two ended
    third = order.index(starts[2])
    assert any(o[1] == "end" for o in order[:third])
