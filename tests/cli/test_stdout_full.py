"""Standard output on a full device (``--json -`` or ``-o -`` into ``/dev/full``, a disk that
filled up under a redirect): exit 5, "store error: write to standard output failed: No space
left on device", as for a report file that cannot be written (not
exit 70, "internal error ... a bug in perfgate"). Synthetic captures from perfgate.synth."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.synth import SynthSpec, write_capture

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _run(args, cwd):
    with open("/dev/full", "w") as full:
        return subprocess.run([sys.executable, "-m", "perfgate", *map(str, args)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300, env=ENV, cwd=cwd)


def test_stdout_on_a_full_device_is_a_store_error(tmp_path):
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=2))
    for args in (["fingerprint", cap, "-o", "-", "--trace", "never"], ["baseline", "list"],
                 ["check", "--baseline", "b", cap, "--json", "-", "--out", tmp_path / "o"]):
        if args[0] == "check":
            assert subprocess.run([sys.executable, "-m", "perfgate", "baseline", "save", "--name", "b", str(cap)],
                                  cwd=tmp_path, env=ENV, capture_output=True).returncode == 0
        p = _run(args, tmp_path)
        assert p.returncode == 5, (args, p.stderr)
        assert "perfgate: store error: write to standard output failed: No space left on device" in p.stderr
        assert "internal error" not in p.stderr and "Traceback" not in p.stderr


def test_a_report_write_on_a_full_disk_still_prints_the_verdict(tmp_path):
    """A full disk while check writes its reports: exit 5 and the store error, and the verdict
    reached is still printed (it was not: the StoreError left before the summary)."""
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=2))
    assert subprocess.run([sys.executable, "-m", "perfgate", "baseline", "save", "--name", "b", str(cap)],
                          cwd=tmp_path, env=ENV, capture_output=True).returncode == 0
    code = ("import errno, sys\nimport perfgate.store.atomic as a\n"
            "def full(*x):\n    raise OSError(errno.ENOSPC, 'No space left on device')\n"
            "a.os.fsync = full\nfrom perfgate.cli import main\n"
            f"sys.argv = ['perfgate', 'check', '--baseline', 'b', {str(cap)!r}, '--out', 'o']\nmain()\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert p.returncode == 5, p.stderr
    assert "perfgate: PASS" in p.stdout and "write failed, previous content kept" in p.stderr
    # the verdict line does not claim the exit code the process does not have (was "PASS (exit 0)")
    assert "PASS (reports not written: exit 5, not 0)" in p.stdout and "(exit 0)" not in p.stdout, p.stdout


def test_an_unwritable_out_folder_is_a_store_error_naming_it(tmp_path, monkeypatch):
    """README: "a report write failed" is exit 5; an --out folder that cannot be written is that,
    refused before any work (was: usage error, exit 2)."""
    from click.testing import CliRunner
    from perfgate.cli import main
    import perfgate.store.atomic as atomic
    out = tmp_path / "ro"
    out.mkdir()
    monkeypatch.setattr(atomic.os, "access", lambda p, mode: not (Path(p) == out and mode & os.W_OK))
    r = CliRunner().invoke(main, ["check", "--baseline", "b", str(tmp_path / "cap"), "--out", str(out)])
    assert r.exit_code == 5, r.output
    assert "store error" in r.output and f"folder {out} is not writable" in r.output
