"""Where outputs may go: never onto a capture file (directly or through a link), the baseline a check
compares against, the policy or the history; never two reports on one file; ``-`` is stdout where it
means stdout and refused for the HTML report; a report folder beside the rank folders is allowed."""
from __future__ import annotations

import json

import pytest

from _cli import run


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
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    before = _snapshot(synth_cap)
    extra = ["--baseline", "b", "--baseline-dir", bl] if command == "check" else []
    r = run(command, *extra, option, synth_cap / where, synth_cap)
    assert r.exit_code == 2, r.output
    assert option in r.output and "never writes among a capture's files" in r.output
    assert _snapshot(synth_cap) == before


def test_a_report_folder_beside_the_rank_folders_is_still_allowed(synth_cap, tmp_path):
    """Reports kept with the capture (``--out RUN/perfgate-out``, a fingerprint at the run's top)
    are not among its files: they are written as before."""
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", synth_cap / "perfgate-out", synth_cap)
    assert r.exit_code == 0, r.output
    assert (synth_cap / "perfgate-out" / "perfgate-result.json").is_file()
    r = run("fingerprint", "-o", synth_cap / "fp.json", synth_cap)
    assert r.exit_code == 0, r.output
    assert json.loads((synth_cap / "fp.json").read_text())["metrics"]


def test_a_link_to_a_capture_file_is_refused_by_its_target(synth_cap, tmp_path):
    """An output given as a link elsewhere whose target is a capture file: a write replaces the
    target, so it is refused the same way."""
    link = tmp_path / "fp.json"
    link.symlink_to(synth_cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    before = _snapshot(synth_cap)
    r = run("fingerprint", "-o", link, synth_cap)
    assert r.exit_code == 2, r.output
    assert "kernel_details.csv" in r.output
    assert _snapshot(synth_cap) == before


@pytest.mark.parametrize("opts", [("--junit", "x", "--json", "x", "--markdown", "x"),
                                  ("--json", "o/perfgate-junit.xml"),
                                  ("--html", "o/perfgate-report.md")])
def test_two_reports_on_one_file_are_a_usage_error(synth_cap, tmp_path, opts):
    """``check --junit x --json x --markdown x`` ran, exited 1 and left JSON in the file CI reads
    as JUnit. Now exit 2 naming both options, before anything is written."""
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, synth_cap).exit_code == 0
    args = [str(tmp_path / a) if not a.startswith("--") else a for a in opts]
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", *args, synth_cap)
    assert r.exit_code == 2, r.output
    assert "are one file" in r.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "o").exists()


def test_report_html_dash_is_no_file_named_dash(synth_cap, tmp_path, monkeypatch):
    """``report --html -`` wrote a file literally named ``-``, while ``-`` means stdout for
    ``fingerprint -o`` and ``check --json``: exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    r = run("report", synth_cap, "--html", "-")
    assert r.exit_code == 2 and "--html needs a file path" in r.output
    assert not (tmp_path / "-").exists()


OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def test_a_report_never_replaces_the_baseline_it_compares_against(demo, tmp_path):
    """``check --markdown STORE/main.json --no-baseline-ok`` removed the baseline before reading
    it, then passed as NO_BASELINE (exit 0) and left Markdown where the baseline was."""
    _, cand, bl = demo
    before = (bl / "main.json").read_bytes()
    r = run("check", "--baseline", "main", "--baseline-dir", bl, cand, "--no-baseline-ok",
             "--markdown", bl / "main.json", "--out", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert "--markdown" in r.output and "inside the --baseline-dir folder" in r.output
    assert (bl / "main.json").read_bytes() == before


@pytest.mark.parametrize("command", ["check", "report", "fingerprint"])
def test_a_report_never_replaces_the_policy_or_the_history(demo, tmp_path, command):
    _, cand, bl = demo
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\n")
    db = tmp_path / "h.sqlite"
    assert run("history", "record", "--branch", "main", "--commit", "c0", "--db", db, cand).exit_code == 0
    kept = {p: p.read_bytes() for p in (pol, db)}
    for target, option in ((pol, "--policy"), (db, "--db")):
        if command == "fingerprint" and option == "--db":
            continue
        args = {"check": ["check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o",
                          "--json", target],
                "report": ["report", "--html", target],
                "fingerprint": ["fingerprint", "-o", target]}[command]
        r = run(*args, "--policy", pol, *(["--db", db] if command != "fingerprint" else []), cand)
        assert r.exit_code == 2, r.output
        assert f"is the {option} {target}, which this command reads" in r.output, r.output
    assert {p: p.read_bytes() for p in kept} == kept


def test_the_baseline_store_and_the_history_never_write_into_a_capture(copy_capture, tmp_path):
    cap = copy_capture("level1")
    out = cap / OUT
    before = (out / "trace_view.json").read_bytes()
    r = run("baseline", "save", "--name", "trace_view", "--baseline-dir", out, cap)
    assert r.exit_code == 2 and "never writes among a capture's files" in r.output, r.output
    assert (out / "trace_view.json").read_bytes() == before
    r = run("history", "record", "--branch", "main", "--db", out / "h.db", cap)
    assert r.exit_code == 2 and "never writes among a capture's files" in r.output, r.output
    assert not (out / "h.db").exists()
