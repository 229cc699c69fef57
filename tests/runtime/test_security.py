"""Security: Ray workers get an allow-list of variables (test_scaleout), the cluster-facing
Prefect API server requires a per-run auth string (here), and stage files load with
weights_only, refusing pickled code (tests/common/test_io.py)."""
from __future__ import annotations

import pytest


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
