"""``python3 -m perfgate`` run from a folder that holds a directory named ``perfgate`` (a clone's
parent) with perfgate installed editable: the path finder takes that directory as the namespace
package ``perfgate`` and setuptools' editable finder, after it on ``sys.meta_path``, brings the
submodules. The built-in policies are still found (before: ``MultiplexedPath.joinpath() takes 2
positional arguments``, exit 70)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.synth import SynthSpec, write_capture

ROOT = Path(__file__).resolve().parents[2]

# the editable finder as setuptools installs it: consulted after the path finder, it finds a
# perfgate module by its dotted name under the checkout (never through sys.path)
EDITABLE_FINDER = f"""
import sys
from importlib.machinery import PathFinder
from pathlib import Path

CHECKOUT = Path({str(ROOT)!r})


class EditableFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        parts = name.split(".")
        if parts[0] != "perfgate" or len(parts) < 2:
            return None
        return PathFinder.find_spec(name, [str(CHECKOUT.joinpath(*parts[:-1]))])


# right after the path finder (ahead of any editable finder this machine installed for another checkout)
sys.meta_path.insert(sys.meta_path.index(PathFinder) + 1, EditableFinder)
"""


@pytest.fixture
def clone_parent(tmp_path):
    """A folder holding ``perfgate/`` (a clone: its own ``perfgate/`` package inside) and the
    site folder of the editable finder; the checkout itself is not on sys.path."""
    parent = tmp_path / "work"
    (parent / "perfgate" / "perfgate").mkdir(parents=True)
    (parent / "perfgate" / "README.md").write_text("a clone\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(EDITABLE_FINDER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PERFGATE_"))}
    env["PYTHONPATH"] = str(site)
    return parent, env


def _python_versions():
    """This interpreter, and Python 3.10 (the oldest supported) where one with perfgate's
    dependencies is on PATH."""
    found = [sys.executable]
    exe = shutil.which("python3.10")
    if exe and subprocess.run([exe, "-c", "import pandas, pyarrow, scipy, click, yaml"],
                              capture_output=True).returncode == 0:
        found.append(exe)
    return found


@pytest.mark.parametrize("python", _python_versions())
def test_check_runs_from_a_folder_holding_a_perfgate_directory(clone_parent, tmp_path, python):
    parent, env = clone_parent
    probe = subprocess.run([python, "-c", "import perfgate; print(type(perfgate.__spec__.loader).__name__)"],
                           cwd=parent, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip().endswith("NamespaceLoader"), probe.stdout + probe.stderr   # the situation is real (3.10: _NamespaceLoader)
    where = subprocess.run([python, "-c", "import perfgate.policy.builtin as b; print(b.__file__)"], cwd=parent,
                           env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.strip() == str(ROOT / "perfgate" / "policy" / "builtin.py"), where.stdout + where.stderr
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=1))
    store = tmp_path / "baselines"
    save = subprocess.run([python, "-m", "perfgate", "baseline", "save", "--name", "main", str(cap),
                           "--baseline-dir", str(store)], cwd=parent, env=env, capture_output=True, text=True,
                          timeout=300)
    assert save.returncode == 0, save.stdout + save.stderr
    check = subprocess.run([python, "-m", "perfgate", "check", "--baseline", "main", str(cap), "--baseline-dir",
                            str(store), "--out", str(tmp_path / "out")], cwd=parent, env=env,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "PASS" in check.stdout + check.stderr and "internal error" not in check.stderr


def test_builtin_file_is_the_packaged_policy():
    from perfgate.policy.builtin import builtin_file, resolve_ref
    assert builtin_file("default.yaml") == ROOT / "perfgate" / "policies" / "default.yaml"
    assert builtin_file("mfu", "peaks.yaml").is_file()
    assert resolve_ref("/elsewhere/p.yaml", "perfgate:mfu/matmul.yaml") == builtin_file("mfu", "matmul.yaml")
