"""No earlier run's document is left looking current when a run is refused (exit 3 at ingest) or
dies before writing its own: ``fingerprint -o FILE`` and ``report --html FILE`` remove FILE
before the capture is read (as ``check`` removes its reports), and ``check`` writes every report
it was asked for (``--out`` defaults, ``--junit``, ``--markdown``, ``--json``, ``--html``) with
this run's INVALID_CAPTURE status. A link stays a link (its target, the document, is removed);
streams, FIFOs and folders are never removed. Synthetic captures from the project's writer."""
import json
import os

import pytest
from click.testing import CliRunner

from perfgate.app import gate
from perfgate.cli import main
from perfgate.store.atomic import discard_stale
from perfgate.synth import SynthSpec, write_capture

KD = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
OLD = "an earlier run's document\n"


def run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={}, catch_exceptions=False)
    return r.exit_code, r.output


@pytest.fixture
def refused(tmp_path):
    """A capture refused at ingest: rank 0's kernel_details.csv keeps only its header (exit 3)."""
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=5))
    kd = cap / KD
    kd.write_bytes(kd.read_bytes().split(b"\n")[0] + b"\n")
    return cap


def _stale(*paths):
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(OLD)


def test_fingerprint_output_of_an_earlier_run_is_removed_when_the_capture_is_refused(tmp_path, refused):
    fp = tmp_path / "fp.json"
    _stale(fp)
    code, out = run("fingerprint", refused, "-o", fp, "--trace", "never")
    assert code == 3 and "file has a header but no data rows" in out, out
    assert not fp.exists()
    # a link stays a link: the document it names (what the earlier run wrote through it) is removed
    target = tmp_path / "runs" / "fp-1.json"
    _stale(target)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    code, out = run("fingerprint", refused, "-o", link, "--trace", "never")
    assert code == 3 and link.is_symlink() and not target.exists(), out
    # a later good run writes through the same link again
    good = write_capture(tmp_path / "good", SynthSpec(seed=5))
    code, out = run("fingerprint", good, "-o", link, "--trace", "never")
    assert code == 0 and link.is_symlink() and json.loads(target.read_text())["provenance"]["ranks"] == [0, 1], out


def test_discard_stale_leaves_streams_fifos_folders_and_missing_paths(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    folder = tmp_path / "dir"
    folder.mkdir()
    for p in (fifo, folder, tmp_path / "missing.json", "/dev/stdout", "/dev/null"):
        assert discard_stale(p) is False
    assert fifo.exists() and folder.is_dir() and os.path.exists("/dev/null")
    f = tmp_path / "f.json"
    _stale(f)
    assert discard_stale(f) is True and not f.exists()


@pytest.mark.parametrize("flag", ["--out", "--junit", "--markdown", "--json", "--html"])
def test_every_check_report_holds_this_runs_invalid_status(tmp_path, refused, flag):
    out = tmp_path / "o"
    named = {"--junit": tmp_path / "j.xml", "--markdown": tmp_path / "r.md", "--json": tmp_path / "r.json",
             "--html": tmp_path / "r.html"}
    files = {"junit": out / "perfgate-junit.xml", "markdown": out / "perfgate-report.md",
             "json": out / "perfgate-result.json"}
    extra = []
    if flag != "--out":
        extra = [flag, named[flag]]
        key = flag[2:]
        files[key] = named[flag]
    _stale(*files.values())
    code, text = run("check", "--baseline", "main", refused, "--baseline-dir", tmp_path / "bl", "--out", out,
                     "--trace", "never", *extra)
    assert code == 3 and "INVALID_CAPTURE" in text, text
    for kind, p in files.items():
        body = p.read_text()
        assert OLD not in body, kind
        if kind == "json":
            doc = json.loads(body)
            assert doc["verdict"] == "INVALID_CAPTURE" and "no data rows" in doc["error"]["message"]
        elif kind == "junit":
            assert '<error type="error" message="file has a header but no data rows">' in body, body
        else:
            assert "INVALID_CAPTURE" in body and "no data rows" in body, (kind, body[:300])


def test_a_check_that_dies_before_writing_leaves_no_earlier_report_html_included(tmp_path, refused, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("simulated crash")
    monkeypatch.setattr(gate, "check", boom)
    out = tmp_path / "o"
    html = tmp_path / "r.html"
    files = [out / "perfgate-junit.xml", out / "perfgate-report.md", out / "perfgate-result.json", html]
    _stale(*files)
    code, text = run("check", "--baseline", "main", refused, "--baseline-dir", tmp_path / "bl", "--out", out,
                     "--html", html)
    assert code == 70 and "simulated crash" in text, text
    assert [p.name for p in files if p.exists()] == []


def test_report_html_of_an_earlier_run_is_removed_when_the_capture_cannot_be_read(tmp_path, refused):
    html = tmp_path / "page.html"
    _stale(html)
    code, out = run("report", tmp_path / "no-such-capture", "--html", html, "--trace", "never")
    assert code == 3 and not html.exists(), out
    _stale(html)   # a capture that exists but is refused: the page says why (this run's page)
    code, out = run("report", refused, "--html", html, "--trace", "never")
    assert code == 3 and OLD not in html.read_text() and "no data rows" in html.read_text(), out


def test_history_report_of_an_earlier_run_is_removed_when_the_history_cannot_be_read(tmp_path):
    """``history report --out DIR`` removes the earlier report.md and its metric-NNN.png plots
    before opening the database: a run refused with exit 5 (no database) leaves neither, and a
    good run leaves no plot of a metric it does not report. Other files in DIR are kept."""
    out = tmp_path / "rep"
    _stale(out / "report.md", out / "metric-001.png", out / "metric-007.png", out / "notes.txt")
    code, text = run("history", "report", "--db", tmp_path / "missing.sqlite", "--out", out)
    assert code == 5 and "no history database" in text, text
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # a good run over a history where nothing changed: its own report.md, no plot left behind
    from perfgate.history.store import HistoryStore
    from perfgate.app.run import fingerprint_path
    from perfgate.policy import load_policy
    db = tmp_path / "h.sqlite"
    hs = HistoryStore(db)
    fp = fingerprint_path(write_capture(tmp_path / "c", SynthSpec(seed=1)), load_policy(None), workers=1)
    hs.record(fp, branch="main", commit="c1")
    hs.close()
    _stale(out / "metric-003.png")
    code, text = run("history", "report", "--db", db, "--out", out)
    assert code == 0 and "0 metric(s) changed" in text, text
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.md"]
    assert "No gated metric changed" in (out / "report.md").read_text()


def test_sweep_rollup_of_an_earlier_run_is_removed_before_the_sweep(tmp_path, monkeypatch):
    """``sweep --out DIR`` removes the earlier sweep.csv / sweep.xlsx before it starts: a sweep
    that dies (here: the rollup write fails) leaves no earlier rollup looking current."""
    import perfgate.app.sweep as sweep
    out = tmp_path / "sw"
    _stale(out / "sweep.csv", out / "sweep.xlsx")
    cap = write_capture(tmp_path / "c", SynthSpec(seed=1))

    def broken(table, out_dir):
        from perfgate.errors import StoreError
        raise StoreError("disk full", path=out_dir)
    monkeypatch.setattr(sweep, "write_rollup", broken)
    code, text = run("sweep", cap, "--out", out, "--no-cache", "--workers", "1")
    assert code == 5 and "disk full" in text, text
    assert not (out / "sweep.csv").exists() and not (out / "sweep.xlsx").exists()


@pytest.mark.parametrize("policy_text", ["version: 1\nbogus: 1\n", None])
def test_a_check_refused_for_its_policy_leaves_no_earlier_report(tmp_path, policy_text):
    """A policy that does not load (an unknown key; a missing file) is exit 2 before anything is
    read, and the earlier run's PASS reports (--out's three and --html) are gone (they
    used to keep their old timestamps)."""
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=5))
    out, html, bl = tmp_path / "o", tmp_path / "c.html", tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", cap, "--baseline-dir", bl)[0] == 0
    code, text = run("check", "--baseline", "b", cap, "--baseline-dir", bl, "--out", out, "--html", html)
    assert code == 0 and len(list(out.iterdir())) == 3 and html.is_file(), text
    pol = tmp_path / "p.yaml"
    if policy_text:
        pol.write_text(policy_text)
    code, text = run("check", "--baseline", "b", cap, "--baseline-dir", bl, "--out", out, "--html", html,
                     "--policy", pol)
    assert code == 2 and "policy error" in text, text
    assert list(out.iterdir()) == [] and not html.exists()


def test_earlier_reports_are_removed_before_the_heavy_imports(tmp_path, monkeypatch):
    """An interrupt while ``check`` starts (the gate's ~0.5 s of imports) leaves no earlier verdict
    either: the reports are removed before ``perfgate.app.gate`` is imported (SIGINT
    at 0.3 s left the previous PASS files byte-identical), by a module that imports no pandas."""
    import subprocess
    import sys
    out = tmp_path / "o"
    old = [out / "perfgate-junit.xml", out / "perfgate-report.md", out / "perfgate-result.json"]
    _stale(*old)
    monkeypatch.setitem(sys.modules, "perfgate.app.gate", None)   # importing it now fails, as an interrupt would
    res = CliRunner().invoke(main, ["check", "--baseline", "b", str(tmp_path), "--out", str(out)])
    assert res.exit_code != 0
    assert not any(p.exists() for p in old)
    code = subprocess.run([sys.executable, "-c", "import sys, perfgate.cli, perfgate.store.reportpaths; "
                           "print('pandas' in sys.modules or 'perfgate.report' in sys.modules)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert code == "False"
