"""Test-wide environment: offline settings, the toy method, state in temp folders."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

os.environ["REPRO_EXTRA_FLOWS"] = "tests.runtime.toy_flow"
# `dvc repro` runs `repro exec` in a subprocess: it must import tests.runtime.toy_flow too
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
os.environ.pop("MLFLOW_TRACKING_URI", None)
# Tests assert on outcomes, not on Prefect's API log shipping, which otherwise reports
# "Error logging to API" once the temporary server has stopped at interpreter exit.
os.environ["PREFECT_LOGGING_TO_API_ENABLED"] = "false"
os.environ.pop("REPRO_ROOT", None)
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from flows.runtime.project import set_offline_env  # noqa: E402  (before prefect is imported)

set_offline_env()


@pytest.fixture(scope="session", autouse=True)
def _isolated_state(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    os.environ.setdefault("PREFECT_HOME", str(home))
    yield
    # Prefect's handlers may still flush into closed streams at exit; that is not a test result
    logging.raiseExceptions = False
