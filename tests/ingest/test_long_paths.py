"""A path component longer than the file system's name limit (255 bytes) was an internal error,
exit 70 (``OSError: [Errno 36] File name too long``), for every option that takes a path and for
the capture itself. Outputs and stores are exit 5 (a write that cannot
happen), a capture path exit 3, each naming the option and the limit."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import path_too_long
from perfgate.synth import SynthSpec, write_capture

LONG = "r" * 260


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("long")
    cap = write_capture(d / "cap", SynthSpec(seed=1, steps=2))
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(cap), "--baseline-dir", str(d / "bl")],
                           env={})
    assert r.exit_code == 0, r.output
    return d, cap


def test_path_too_long_names_the_component_and_the_limit(tmp_path):
    assert path_too_long(tmp_path / "ok") is None
    why = path_too_long(tmp_path / LONG / "x")
    assert why.startswith("a path component is 260 bytes long, more than the file system's") and "name limit" in why
    assert "the path is" in path_too_long("/" + "/".join(["a" * 200] * 30))


@pytest.mark.parametrize("option, code", [("--out", 5), ("--html", 5), ("--junit", 5), ("--baseline-dir", 5),
                                          ("--history", 0), ("history:main", 5), ("capture", 3)])
def test_check_with_a_too_long_path_is_refused_with_its_exit_code(setup, option, code):
    d, cap = setup
    args = {"--out": ["--out", str(d / LONG)], "--html": ["--html", str(d / (LONG + ".html"))],
            "--junit": ["--junit", str(d / (LONG + ".xml"))], "--baseline-dir": ["--baseline-dir", str(d / LONG)],
            "--history": ["--history", str(d / (LONG + ".sqlite"))],
            "history:main": ["--history", str(d / (LONG + ".sqlite"))]}.get(option, [])
    target = str(d / LONG) if option == "capture" else str(cap)
    base = [] if option == "--baseline-dir" else ["--baseline-dir", str(d / "bl")]
    out = [] if option in ("--out",) else ["--out", str(d / "o")]
    # --history with a stored baseline feeds only the HTML sparklines: a warning, the check runs;
    # with history:main the check is a STORE_ERROR result, its reports written
    name = "history:main" if option == "history:main" else "main"
    r = CliRunner().invoke(main, ["check", "--baseline", name, target, *base, *out, *args], env={})
    assert r.exit_code == code, r.output
    if option == "--history":
        assert "not used, the HTML trend sparklines are left out" in r.output
    assert "internal error" not in r.output and " bytes long, more than" in r.output, r.output


def test_other_commands_with_a_too_long_path(setup):
    d, cap = setup
    run = lambda *a: CliRunner().invoke(main, [str(x) for x in a], env={})
    for args, code in ((["fingerprint", cap, "-o", d / (LONG + ".json")], 5),
                       (["history", "record", cap, "--branch", "main", "--db", d / (LONG + ".sqlite")], 5),
                       (["report", d / LONG, "--html", d / "x.html"], 3),
                       (["baseline", "save", "--name", "m2", cap, "--baseline-dir", d / LONG], 5)):
        r = run(*args)
        assert r.exit_code == code and "internal error" not in r.output and " bytes long, more than" in r.output, \
            (args[0], r.exit_code, r.output)
