"""The exit code a command decides stands whatever happens to stderr: a reader that went away
(``2>&1 | head -0``), a full device (``2>/dev/full``) or a closed descriptor (``2>&-``), for every
way out: click's usage error, a PerfgateError (``_fail``), an internal error and a verdict
(``baseline save --name a/b CAP 2>&1 | head -0`` exited 0, ``check --baseline
a/b CAP 2>&1 | head -0`` 1, the regression code, ``... 2>/dev/full`` 1). A closed stdout pipe
keeps the code too (``| head -0``); stdout on a full device stays exit 5 (tests/cli/test_stdout_full.py).
Runs the console script's way in (``main()`` without arguments) in a subprocess, on synthetic
captures from perfgate.synth."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.synth import SynthSpec, write_capture

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
ENV.pop("PERFGATE_DEBUG", None)

# how the streams are broken, as a shell spells it (stdout, stderr): "pipe" = a pipe whose reader
# has gone, "full" = /dev/full, "closed" = no descriptor at all
STREAMS = {
    "2>&1 | head -0": ("pipe", "pipe"),
    "2>&1 >/dev/null | head -0": (None, "pipe"),
    "| head -0": ("pipe", None),
    "2>/dev/full": (None, "full"),
    "2>&-": (None, "closed"),
    ">&- 2>&-": ("closed", "closed"),
    ">&-": ("closed", None),
}

BOOM = ("import perfgate.app.gate as g\n"
        "def boom(*a, **k):\n"
        "    raise ZeroDivisionError('boom')\n"
        "g.save_baseline = g.check_and_report = boom\n")


def _run(args, cwd, streams, prelude=""):
    """``main()`` as the console script calls it, with stdout / stderr broken as ``streams``
    says; returns the exit code."""
    out, err = STREAMS[streams]
    code = f"{prelude}import sys\nfrom perfgate.cli import main\nsys.argv = ['perfgate', *{[str(a) for a in args]!r}]\nmain()\n"
    redirect = {"pipe": "", "full": "/dev/full", "closed": "&-", None: "/dev/null"}
    shell = 'exec "$0" -c "$1"'
    for fd, how in ((1, out), (2, err)):
        if how != "pipe":
            shell += f" {fd}>{redirect[how]}"
    r, w = os.pipe()
    os.close(r)   # the reader went away before the first write, as `| head -0`
    try:
        p = subprocess.run(["sh", "-c", shell, sys.executable, code], cwd=cwd, env=ENV, timeout=300,
                           stdout=w if out == "pipe" else None, stderr=w if err == "pipe" else None)
    finally:
        os.close(w)
    return p.returncode


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    d = tmp_path_factory.mktemp("streams")
    cap = write_capture(d / "cap", SynthSpec(seed=3))
    slow = write_capture(d / "slow", SynthSpec(seed=3, slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.5}))
    p = subprocess.run([sys.executable, "-m", "perfgate", "baseline", "save", "--name", "main", str(cap)],
                       cwd=d, env=ENV, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return d, cap, slow


USAGE_ERRORS = (("baseline", "save", "--name", "a/b", "{cap}"),      # a PerfgateError (_fail)
                ("check", "--baseline", "a/b", "{cap}", "--out", "{d}/o"),
                ("check", "--bogus", "{cap}"),                        # click's own usage error
                ("--bogus",),
                ("baseline", "save", "{cap}"))                        # a missing required option
OTHER_ERRORS = ((("fingerprint", "{d}/nosuch"), "", 3),
                (("baseline", "show", "nosuch"), "", 4),
                (("baseline", "save", "--name", "x", "{cap}"), BOOM, 70))
VERDICTS = ((("check", "--baseline", "main", "{slow}", "--out", "{d}/o1"), 1),
            (("check", "--baseline", "main", "{cap}", "--out", "{d}/o0"), 0),
            (("check", "--baseline", "main", "{slow}", "--out", "{d}/o2", "--json", "-"), 1))


def _every_pair(cases, width=1):
    """Every (broken streams, case) pair: each stream with ``width`` of the cases (turn by turn, so
    that every case meets some stream) runs in the default suite, the rest of the product is slow
    (each pair is a Python start-up in a subprocess)."""
    streams = list(STREAMS)
    default = {(s, (i * width + k) % len(cases)) for i, s in enumerate(streams) for k in range(width)}
    return [pytest.param(s, c, id=f"{s}-{c}", marks=() if (s, c) in default else pytest.mark.slow)
            for s in streams for c in range(len(cases))]


def _args(template, captures):
    d, cap, slow = captures
    return [a.format(d=d, cap=cap, slow=slow) for a in template]


@pytest.mark.parametrize("streams, case", _every_pair(USAGE_ERRORS, width=2))
def test_usage_errors_keep_exit_2(captures, streams, case):
    args = _args(USAGE_ERRORS[case], captures)
    assert _run(args, captures[0], streams) == 2, (args, streams)


@pytest.mark.parametrize("streams, case", _every_pair(OTHER_ERRORS))
def test_other_errors_keep_their_codes(captures, streams, case):
    template, prelude, code = OTHER_ERRORS[case]
    assert _run(_args(template, captures), captures[0], streams, prelude=prelude) == code, streams


@pytest.mark.parametrize("streams, case", _every_pair(VERDICTS))
def test_verdicts_keep_their_codes(captures, streams, case):
    template, code = VERDICTS[case]
    assert _run(_args(template, captures), captures[0], streams) == code, streams


def test_help_and_version_into_a_closed_pipe_exit_0(captures):
    d, _, _ = captures
    for args in (["--help"], ["--version"], ["check", "--help"], ["baseline", "--help"]):
        assert _run(args, d, "| head -0") == 0, args


@pytest.mark.parametrize("streams", ["| head -0", "2>&1 | head -0"])
def test_a_listing_with_a_damaged_baseline_keeps_exit_5_when_its_reader_leaves(captures, tmp_path, streams):
    """``baseline list | head -1`` with a damaged baseline file exited 0 (helper's leftover): the
    listing's exit code is decided before its first line is printed."""
    d, cap, _ = captures
    bl = tmp_path / "bl"
    bl.mkdir()
    (bl / "aaa.json").write_text((d / "baselines" / "main.json").read_text())
    (bl / "zzz.json").write_text('{"perfgate_baseline": 1, "fingerprint": ')
    assert _run(["baseline", "list", "--baseline-dir", bl], d, streams) == 5
