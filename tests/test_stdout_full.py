"""Standard output on a full device (``--json -`` or ``-o -`` into ``/dev/full``, a disk that
filled up under a redirect): exit 5, "store error: write to standard output failed: No space
left on device", as for a report file that cannot be written (fresh-user report, round 8:
exit 70, "internal error ... a bug in perfgate"). Synthetic captures from perfgate.synth."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.synth import SynthSpec, write_capture

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


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
