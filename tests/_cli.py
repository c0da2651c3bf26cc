"""Running the perfgate CLI from a test: in process through click's CliRunner (``run``), or as
``python -m perfgate`` in a child process that inherits PYTHONPATH, so the worktree's copy runs
(``run_process``)."""
from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner

from perfgate.cli import main


def run(*args, env=None):
    """``perfgate ARGS`` in process; every argument passed through ``str``. ``env`` replaces the
    default, a push event (``GITHUB_EVENT_NAME=push``). Returns click's ``Result``."""
    return CliRunner().invoke(main, [str(a) for a in args], env=env or {"GITHUB_EVENT_NAME": "push"})


def run_process(*args, env=None, cwd=None, timeout=120):
    """``python -m perfgate ARGS`` in a child process, this environment updated with ``env``.
    Returns the ``CompletedProcess`` (text stdout and stderr captured)."""
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "perfgate", *args], capture_output=True, text=True, env=e,
                          cwd=cwd, timeout=timeout)


def fingerprint_without_trace(cap, tmp_path, *extra):
    """``perfgate fingerprint CAP -o tmp_path/fp.json --trace never EXTRA`` in process (``run``)."""
    return run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never", *extra)
