"""A dependency that cannot be imported (pandas, pyarrow, click ... missing from the Python that
runs perfgate) is exit 2 naming the package and the command that installs it, never "internal
error ... a bug in perfgate" (exit 70). The subprocess's imports are blocked by a meta-path
finder installed from a sitecustomize."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.errors import REQUIRED, missing_dependency
from perfgate.synth import SynthSpec, write_capture

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = """
import os
import sys

BLOCKED = set(os.environ["BLOCK_MODULES"].split(","))


class Blocker:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocker)
"""


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    d = tmp_path_factory.mktemp("missing-dep")
    return write_capture(d / "cap", SynthSpec(seed=1))


def _run(tmp_path, blocked, *args):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PERFGATE_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), BLOCK_MODULES=blocked)
    return subprocess.run([sys.executable, "-m", "perfgate", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("blocked", ["pandas", "pyarrow"])
def test_a_missing_dependency_is_exit_2_naming_it(tmp_path, capture, blocked):
    r = _run(tmp_path, blocked, "baseline", "save", "--name", "main", str(capture), "--baseline-dir",
             str(tmp_path / "baselines"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "internal error" not in r.stderr and "a bug in perfgate" not in r.stderr, r.stderr
    assert f"{blocked} is not installed" in r.stderr, r.stderr
    assert f"-m pip install '{REQUIRED[blocked]}'" in r.stderr and sys.executable in r.stderr, r.stderr
    assert not (tmp_path / "baselines" / "main.json").exists()


def test_a_missing_click_stops_the_command_line_with_exit_2(tmp_path):
    r = _run(tmp_path, "click", "--version")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "click is not installed" in r.stderr and "pip install 'click>=8.1'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_only_dependencies_are_forgiven():
    """perfgate's own modules and modules it does not depend on stay internal errors (None)."""
    assert missing_dependency(ModuleNotFoundError("x", name="perfgate.metrics.nothing")) is None
    assert missing_dependency(ModuleNotFoundError("x", name="somethingelse")) is None
    assert missing_dependency(ImportError("no name")) is None
    assert missing_dependency(ValueError("pandas")) is None
    old = missing_dependency(ImportError("cannot import name 'ArrowDtype' from 'pandas'", name="pandas"))
    assert old is not None and old.exit_code == 2 and "pandas cannot be imported" in old.message
    extra = missing_dependency(ModuleNotFoundError("x", name="matplotlib.pyplot"))
    assert extra is not None and "'html' extra" in extra.message


def test_the_list_is_pyproject_s_dependencies():
    import re
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert sorted(REQUIRED.values(), key=str.lower) == sorted(deps, key=str.lower)
    assert all(re.match(r"[A-Za-z0-9_.-]+", d) for d in deps)
