"""Shared fixtures. Real captures are read in place from ../shared/fixtures/ascend/ (never
copied into the repo). Where that folder is absent the tests that need it skip with a
reason; with PERFGATE_REQUIRE_REAL=1 (set by .ci/run) its absence is a failure instead."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from perfgate.policy import load_policy

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PERFGATE_SHARED", REPO.parent / "shared"))
ASCEND = SHARED / "fixtures" / "ascend"
TEXT = ASCEND / "msinsight" / "test" / "data" / "pytorch" / "text"


def pytest_collection_modifyitems(config, items):
    """The tests marked ``slow`` run only when the ``-m`` expression names ``slow``
    (``-m slow``, ``-m 'slow or not slow'``): a command-line ``-m 'not bench'`` replaces addopts'
    expression, and the default suite must still leave them out (docs/testing.md)."""
    if re.search(r"\bslow\b", config.getoption("markexpr") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def _need(path: Path) -> Path:
    if path.exists():
        return path
    msg = (f"real Ascend captures not found at {path} (this workplace's ../shared/fixtures/ascend; "
           f"elsewhere set PERFGATE_SHARED to the folder holding fixtures/)")
    if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
        pytest.fail(msg + " and PERFGATE_REQUIRE_REAL=1", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def ascend() -> Path:
    return _need(ASCEND)


@pytest.fixture(scope="session")
def text_captures() -> Path:
    """The 2-rank G2025 text captures: level0, level1, level2 (three runs of one job)."""
    return _need(TEXT)


@pytest.fixture
def copy_capture(tmp_path, text_captures):
    """Copy a real capture (e.g. "level1") to a temp dir for mutation; returns its path."""
    def _copy(level: str, name: str | None = None) -> Path:
        dst = tmp_path / (name or level)
        shutil.copytree(text_captures / level, dst)
        return dst
    return _copy


@pytest.fixture(scope="session")
def policy():
    return load_policy()


@pytest.fixture
def llm_pair(ascend, tmp_path):
    """Two copies (``base``, ``cand``) of the real LLM capture msinsight/test/st/level2 (rank 0 with
    no trace_view.json, rank 1 partial), to mutate."""
    import shutil
    src = ascend / "msinsight/test/st/level2"
    if not src.is_dir():
        pytest.skip(f"real LLM capture not found at {src}")
    base, cand = tmp_path / "base", tmp_path / "cand"
    shutil.copytree(src, base)
    shutil.copytree(src, cand)
    return base, cand


@pytest.fixture
def synth_cap(tmp_path):
    """A synthetic capture of 2 ranks and 3 steps (``tmp_path/cap``)."""
    from perfgate.synth import SynthSpec, write_capture
    return write_capture(tmp_path / "cap", SynthSpec(ranks=2, steps=3))


@pytest.fixture
def demo(tmp_path):
    """The demo pair (``base``, ``cand``) under ``tmp_path/caps``, ``base`` saved through the CLI as
    baseline ``main`` in ``bl`` (``tmp_path/bl``); returns ``(base, cand, bl)``."""
    from _cli import run
    from perfgate.synth import write_demo_pair
    base, cand = write_demo_pair(tmp_path / "caps")
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "main", "--baseline-dir", bl, base).exit_code == 0
    return base, cand, bl


@pytest.fixture
def pair(tmp_path):
    """A default synthetic capture (``tmp_path/cap``) saved as baseline ``l1`` in a store at
    ``tmp_path/bl`` under the built-in policy; returns ``(cap, store, policy)``."""
    from perfgate.app.gate import save_baseline
    from perfgate.store.baselines import BaselineStore
    from perfgate.synth import SynthSpec, write_capture
    cap = write_capture(tmp_path / "cap", SynthSpec())
    store = BaselineStore(tmp_path / "bl")
    policy = load_policy(None)
    save_baseline(cap, "l1", policy=policy, store=store, env={})
    return cap, store, policy
