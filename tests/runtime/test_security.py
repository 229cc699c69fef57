"""Security: torch files load with weights_only=True, Ray workers get an allow-list of variables
(test_scaleout), the cluster-facing Prefect API server requires a per-run auth string."""
from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest
import torch

from components.common.io import load_torch, save_torch


class Payload:
    """A pickled object: loading it with weights_only=False would run its __reduce__."""

    def __reduce__(self):
        return (print, ("code ran while loading",))


def test_load_torch_refuses_pickled_objects(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"weights": torch.ones(2), "payload": Payload()}, path)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        load_torch(path)


def test_what_save_torch_writes_loads_back(tmp_path):
    state = collections.OrderedDict(w=torch.randn(3, 2), b=torch.zeros(2))
    blob = {"state": state, "shape": torch.Size([3, 2]), "dtype": torch.float16, "names": ["a", "b"],
            "pair": (1, 2.5), "none": None, "flag": True}
    save_torch(tmp_path / "ok.pt", blob)
    back = load_torch(tmp_path / "ok.pt")
    assert torch.equal(back["state"]["w"], state["w"]) and back["names"] == ["a", "b"]
    save_torch(tmp_path / "arrays.pt", {"x": np.arange(3.0), "labels": np.array(["a", "b"])})
    back = load_torch(tmp_path / "arrays.pt")          # numpy arrays of plain dtypes are data
    assert np.array_equal(back["x"], np.arange(3.0)) and list(back["labels"]) == ["a", "b"]
    with pytest.raises(TypeError, match="weights_only=True"):
        save_torch(tmp_path / "objects.pt", {"x": np.array([collections.Counter()], dtype=object)})
    assert not (tmp_path / "objects.pt").exists()     # refused before anything was written


def test_cluster_prefect_server_requires_the_run_auth_string(tmp_path, monkeypatch):
    import base64
    import urllib.error
    import urllib.request

    from flows.runtime.prefect_flow import _reachable_server

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    server = _reachable_server("127.0.0.1", auth="repro:per-run-secret")
    server.start(timeout=180)
    try:
        url = f"{server.api_url}/flows/filter"
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=30)
        token = base64.b64encode(b"repro:per-run-secret").decode()
        request = urllib.request.Request(url, data=b"{}", method="POST", headers={
            "Authorization": f"Basic {token}", "Content-Type": "application/json"})
        assert urllib.request.urlopen(request, timeout=30).status == 200
    finally:
        server.stop()
