"""save_torch / load_torch: what the stages save loads back under ``weights_only=True``, and a file
holding pickled objects (code, class instances, object arrays) is refused with one clear line."""
from __future__ import annotations

import collections
import dataclasses
import pickle

import numpy as np
import pytest
import torch

from components.common.io import load_torch, save_torch


@dataclasses.dataclass
class Record:
    name: str
    values: np.ndarray


class Payload:
    """Unpickling this would run code: it touches a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_plain_containers_round_trip(tmp_path):
    state = collections.OrderedDict(w=torch.randn(3, 2), b=torch.zeros(2, dtype=torch.float16))
    blob = {"state": state, "shape": torch.Size([3, 2]), "dtype": torch.bfloat16, "names": ["a", "b"],
            "pair": (1, 2.5), "none": None, "flag": True, "text": "x", "nested": [{"k": (torch.ones(1),)}]}
    save_torch(tmp_path / "plain.pt", blob)
    back = load_torch(tmp_path / "plain.pt")
    assert type(back["state"]) is collections.OrderedDict and list(back["state"]) == ["w", "b"]
    assert torch.equal(back["state"]["w"], state["w"]) and back["state"]["b"].dtype == torch.float16
    assert {k: v for k, v in back.items() if k not in ("state", "nested")} == \
        {k: v for k, v in blob.items() if k not in ("state", "nested")}
    assert torch.equal(back["nested"][0]["k"][0], torch.ones(1))


def test_numpy_arrays_of_plain_dtypes_round_trip(tmp_path):
    arrays = {"f64": np.linspace(0, 1, 5), "f32": np.ones((2, 3), np.float32), "i64": np.arange(4),
              "u8": np.arange(6, dtype=np.uint8).reshape(2, 3), "bool": np.array([True, False]),
              "str": np.array(["left", "right"]), "empty": np.zeros((0, 8)),
              "fields": np.zeros(2, dtype=[("x", "f4"), ("n", "i4")]),
              "scalars": [np.float32(1.5), np.int64(7), np.bool_(True)]}
    save_torch(tmp_path / "arrays.pt", arrays)
    back = load_torch(tmp_path / "arrays.pt")
    for key, value in arrays.items():
        if key == "scalars":
            assert back[key] == value and [type(v) for v in back[key]] == [type(v) for v in value]
        else:
            assert back[key].dtype == value.dtype and np.array_equal(back[key], value)


@pytest.mark.parametrize("refused", ["code", "instance", "object_array"])
def test_load_torch_refuses_pickled_objects(tmp_path, refused):
    marker = tmp_path / "code-ran"
    obj = {"code": Payload(marker), "instance": Record("a", np.zeros(2)),
           "object_array": np.array([1, "a"], dtype=object)}[refused]
    path = tmp_path / "untrusted.pt"
    torch.save({"weights": torch.ones(2), "x": obj}, path)      # written by someone else, not save_torch
    with pytest.raises(pickle.UnpicklingError) as err:
        load_torch(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message and len(message) < 600
    assert not marker.exists()                                  # nothing was executed


@pytest.mark.parametrize("obj", [Record("a", np.zeros(2)), np.array([None], dtype=object)],
                         ids=["dataclass", "object_array"])
def test_save_torch_refuses_what_cannot_load_back(tmp_path, obj):
    path = tmp_path / "refused.pt"
    with pytest.raises(TypeError, match="weights_only=True"):
        save_torch(path, {"x": obj})
    assert not path.exists() and list(tmp_path.iterdir()) == []  # refused before anything was written


def test_concurrent_loads_from_threads_all_succeed(tmp_path):
    """Stages load in parallel threads: one load finishing must never withdraw the numpy
    allow-list from another (the safe_globals context manager did, process-wide)."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)     # switch threads often, so loads interleave
    try:
        save_torch(tmp_path / "a.pt", {"x": np.arange(1000.0), "keep": np.ones(50, bool)})
        with ThreadPoolExecutor(8) as pool:
            backs = list(pool.map(lambda _: load_torch(tmp_path / "a.pt"), range(400)))
    finally:
        sys.setswitchinterval(interval)
    assert all(np.array_equal(b["x"], np.arange(1000.0)) for b in backs)
