"""Headless Debian Chromium for the browser tests of the HTML report and the history site: the
executable, its offline arguments, and the playwright client or a skip (a failure under
PERFGATE_REQUIRE_REAL=1, as .ci/run sets it) naming what is missing."""
from __future__ import annotations

import os

import pytest

CHROMIUM = os.environ.get("PERFGATE_CHROMIUM", "/usr/bin/chromium")
# offline: no update checks, no sync, no QUIC; a page that fetched anything would be a defect
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def playwright_or_skip():
    """The playwright ``sync_api`` module, or a skip with the reason."""
    reasons = []
    try:
        from playwright import sync_api
    except ImportError:
        sync_api = None
        reasons.append("the playwright Python client is not installed (pip install playwright)")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        reasons.append(f"no chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)")
    if reasons:
        msg = "; ".join(reasons)
        if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
            pytest.fail(msg + " and PERFGATE_REQUIRE_REAL=1", pytrace=False)
        pytest.skip(msg)
    return sync_api
