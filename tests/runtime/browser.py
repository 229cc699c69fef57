"""Headless Debian Chromium driven by Playwright, for the UI tests (nothing downloads a browser).

Screenshots go to ``test-artifacts/`` at the repository root, where CI keeps them."""
from __future__ import annotations

import os

import pytest

from flows.runtime.testing import REPO_ROOT

CHROMIUM = "/usr/bin/chromium"
# without the background-networking flags Chromium keeps dialling Google on this closed network
BROWSER_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = REPO_ROOT / "test-artifacts"


@pytest.fixture
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("REPRO_REQUIRE_BROWSER"):
            pytest.fail(f"{CHROMIUM} missing (.ci/run installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_FLAGS)
        yield chromium
        chromium.close()
