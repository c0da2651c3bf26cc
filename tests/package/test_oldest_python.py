"""perfgate runs on the oldest Python that pyproject.toml's ``requires-python`` admits: CI runs the
default suite there (.github/workflows/ci.yml's matrix), and ``python -m perfgate`` is run on that
Python from a folder holding a directory named ``perfgate`` (a clone's parent, where
``perfgate`` on the path is a namespace package first: ``importlib.resources`` differs between
3.10 and 3.11 there)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPS = "import pandas, numpy, pyarrow, scipy, ruptures, click, yaml, msgspec, orjson, ijson, sqlite_utils, github3"


def oldest_python() -> tuple[int, int]:
    """The ``>=X.Y`` floor of pyproject.toml's ``requires-python``."""
    m = re.search(r'^requires-python\s*=\s*">=\s*(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert m, "requires-python is not a plain >=X.Y floor"
    return int(m.group(1)), int(m.group(2))


def test_ci_runs_the_suite_on_the_oldest_supported_python():
    ci = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    versions = ci["jobs"]["test"]["strategy"]["matrix"]["python-version"]
    floor = "%d.%d" % oldest_python()
    assert floor in [str(v) for v in versions], versions
    setup = next(s for s in ci["jobs"]["test"]["steps"] if str(s.get("uses", "")).startswith("actions/setup-python"))
    assert setup["with"]["python-version"] == "${{ matrix.python-version }}"


def _interpreter() -> str | None:
    """A Python of the oldest supported version with perfgate's dependencies: this one, else
    ``$PERFGATE_OLDEST_PYTHON``, else ``pythonX.Y`` on PATH; None when there is none."""
    floor = oldest_python()
    if sys.version_info[:2] == floor:
        return sys.executable
    for exe in (os.environ.get("PERFGATE_OLDEST_PYTHON"), shutil.which("python%d.%d" % floor)):
        if not exe:
            continue
        try:
            r = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); " + DEPS],
                               capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0 and r.stdout.strip() == "%d.%d" % floor:
            return exe
    return None


def test_python_m_perfgate_runs_on_the_oldest_supported_python(tmp_path):
    exe = _interpreter()
    if exe is None:
        pytest.skip("no Python %d.%d with perfgate's dependencies here (CI's matrix has one; locally set "
                    "PERFGATE_OLDEST_PYTHON to a venv's python that has them)" % oldest_python())
    (tmp_path / "perfgate").mkdir()   # a clone's parent: `perfgate` on sys.path[0] is a namespace package
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([exe, "-m", "perfgate", "demo", "--out", "demo"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr   # the demo's pair regresses: exit 1, not 70
    assert "perfgate: REGRESSION (exit 1)" in r.stdout and "internal error" not in r.stdout + r.stderr
    assert (tmp_path / "demo" / "report" / "perfgate-result.json").is_file()
