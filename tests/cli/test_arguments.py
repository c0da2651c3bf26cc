"""Command-line arguments that cannot work are usage errors (exit 2): a calibrate k that gates
nothing, --no-trace beside --trace always, arguments that are not UTF-8; a missing capture is named
once."""
from __future__ import annotations

import pytest

from _cli import run


def test_a_missing_capture_is_named_once(tmp_path):
    r = run("fingerprint", tmp_path / "leve2")
    assert r.exit_code == 3
    assert r.output.count(str(tmp_path / "leve2")) == 1, r.output


@pytest.mark.parametrize("k", ["inf", "1e308", "1e20", "nan", "0"])
def test_calibrate_refuses_a_k_that_gates_nothing(tmp_path, k):
    """``calibrate --k=inf`` (or 1e308) was exit 70 (OverflowError in the rounding); ``--k=1e20``
    wrote share tolerances of 3.5e19 pp, a policy that lets any change through. Exit 2."""
    caps = []
    for s in (1, 2, 3):
        caps.append(tmp_path / f"s{s}")
        assert run("synth", caps[-1], "--seed", s).exit_code == 0
    r = run("calibrate", *caps, "--out", tmp_path / "c.yaml", f"--k={k}")
    assert r.exit_code == 2, r.output
    assert "k must be a finite number in (0, 100]" in r.output and not (tmp_path / "c.yaml").exists()


def test_no_trace_beside_trace_always_is_a_usage_error(synth_cap, tmp_path):
    """``--trace always --no-trace`` on a capture without trace_view.json passed (exit 0): the
    flag won and the requirement was dropped in silence."""
    for p in synth_cap.rglob("trace_view.json"):
        p.unlink()
    for order in (["--trace", "always", "--no-trace"], ["--no-trace", "--trace", "always"]):
        r = run("fingerprint", synth_cap, *order, "-o", tmp_path / "fp.json")
        assert r.exit_code == 2 and "contradict" in r.output, r.output
    assert run("fingerprint", synth_cap, "--trace", "always", "-o", tmp_path / "fp.json").exit_code == 3


@pytest.mark.parametrize("argv", [
    ["history", "record", "--branch", "ma\udcffin"], ["history", "record", "--branch", "main", "--note", "bad\udcff"],
    ["baseline", "save", "--name", "x", "--branch", "ma\udcffin"],
])
def test_arguments_that_are_not_utf8_are_refused_not_stored(demo, tmp_path, argv):
    """``baseline save --branch $'ma\\xffin'`` stored a lone surrogate: every later check of that
    baseline was exit 70; ``history record --note $'bad\\xff'`` was exit 70."""
    _, cand, bl = demo
    extra = ["--db", tmp_path / "h.sqlite"] if argv[0] == "history" else ["--baseline-dir", bl]
    r = run(*argv, *extra, cand)
    assert r.exit_code == 2 and "not UTF-8 text" in r.output, r.output
    assert not (bl / "x.json").exists() and not (tmp_path / "h.sqlite").exists()
