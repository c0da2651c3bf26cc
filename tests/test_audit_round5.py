"""Defects found by the fifth audit round (2026-12-06, eleventh session): a helper breaking the
installed command with bad input; each test holds the behaviour wanted."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth.writer import SynthSpec, write_capture


def _run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env or {"GITHUB_EVENT_NAME": "push"})


@pytest.fixture
def synth_cap(tmp_path):
    return write_capture(tmp_path / "cap", SynthSpec(ranks=2, steps=3))


def _snapshot(cap):
    return {p.relative_to(cap): p.read_bytes() for p in sorted(cap.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command, option, where", [
    ("fingerprint", "-o", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"),
    ("fingerprint", "-o", "rank0_ascend_pt/profiler_info_0.json"),
    ("fingerprint", "-o", "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/fp.json"),
    ("check", "--json", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"),
    ("check", "--junit", "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"),
    ("check", "--out", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"),
    ("report", "--html", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"),
])
def test_an_output_among_the_capture_files_is_refused_and_nothing_is_removed(synth_cap, tmp_path, command, option,
                                                                             where):
    """``fingerprint -o CAP/rank0/ASCEND_PROFILER_OUTPUT/kernel_details.csv CAP`` removed the
    kernel table (an earlier output is removed before the capture is read), then exited 3 "no
    kernel_details.csv"; ``check --json`` at it wrote the JSON result over the input. Now exit 2
    before anything is removed, naming the option and the file, and the capture is untouched."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    before = _snapshot(synth_cap)
    extra = ["--baseline", "b", "--baseline-dir", bl] if command == "check" else []
    r = _run(command, *extra, option, synth_cap / where, synth_cap)
    assert r.exit_code == 2, r.output
    assert option in r.output and "never writes among a capture's files" in r.output
    assert _snapshot(synth_cap) == before


def test_a_report_folder_beside_the_rank_folders_is_still_allowed(synth_cap, tmp_path):
    """Reports kept with the capture (``--out RUN/perfgate-out``, a fingerprint at the run's top)
    are not among its files: they are written as before."""
    bl = tmp_path / "bl"
    assert _run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    r = _run("check", "--baseline", "b", "--baseline-dir", bl, "--out", synth_cap / "perfgate-out", synth_cap)
    assert r.exit_code == 0, r.output
    assert (synth_cap / "perfgate-out" / "perfgate-result.json").is_file()
    r = _run("fingerprint", "-o", synth_cap / "fp.json", synth_cap)
    assert r.exit_code == 0, r.output
    assert json.loads((synth_cap / "fp.json").read_text())["metrics"]


def test_a_link_to_a_capture_file_is_refused_by_its_target(synth_cap, tmp_path):
    """An output given as a link elsewhere whose target is a capture file: a write replaces the
    target, so it is refused the same way."""
    link = tmp_path / "fp.json"
    link.symlink_to(synth_cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    before = _snapshot(synth_cap)
    r = _run("fingerprint", "-o", link, synth_cap)
    assert r.exit_code == 2, r.output
    assert "kernel_details.csv" in r.output
    assert _snapshot(synth_cap) == before
