"""`perfgate check` over a damaged baseline store still writes every report it was asked for.

A damaged baseline file (not JSON, cut short, NaN / Infinity values, no metrics, no format marker,
not UTF-8) or a damaged history database (cut short, not SQLite) is status DAMAGED_BASELINE, exit 5:
the JUnit (an ``<error>`` testcase, so CI marks it red), Markdown, JSON and HTML reports are written,
name the damaged file and say nothing was judged; ``--no-baseline-ok`` does not forgive it; nothing
is written to the store. A missing baseline keeps its own behaviour (NO_BASELINE, exit 4 / 0).
Synthetic captures from the project's writer."""
import hashlib
import json
import shutil

import pytest
from click.testing import CliRunner
from junitparser import Error, JUnitXml, Skipped

from perfgate import terms
from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture


def run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={}, catch_exceptions=False)
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A baseline 'main' saved from one synthetic capture, a history database with two runs of
    branch main, and a candidate capture (another seed of the same job)."""
    d = tmp_path_factory.mktemp("store")
    base = write_capture(d / "base", SynthSpec(seed=1))
    cand = write_capture(d / "cand", SynthSpec(seed=2))
    code, out = run("baseline", "save", "--name", "main", base, "--baseline-dir", d / "bl")
    assert code == 0, out
    for i, cap in enumerate((base, cand)):
        code, out = run("history", "record", cap, "--branch", "main", "--commit", f"c{i}", "--db", d / "h.sqlite")
        assert code == 0, out
    return d, cand


def _doc_damage(fn):
    def damage(good: bytes) -> bytes:
        doc = json.loads(good)
        fn(doc)
        return json.dumps(doc).encode()   # json.dumps writes NaN / Infinity literals: not JSON
    return damage


def _first_metric(doc):
    return doc["fingerprint"]["metrics"][next(iter(doc["fingerprint"]["metrics"]))]


DAMAGES = {   # kind -> (bytes of main.json -> damaged bytes, words of the message, byte offset expected)
    "not_json": (lambda good: b"{not json", "not valid JSON", True),
    "truncated": (lambda good: good[: len(good) // 2], "not valid JSON", True),
    "nan_value": (_doc_damage(lambda d: _first_metric(d).update(value=float("nan"))), "not a finite number", False),
    "infinity_value": (_doc_damage(lambda d: _first_metric(d).update(value=float("inf"))), "not a finite number",
                       False),
    "no_metrics": (_doc_damage(lambda d: d["fingerprint"].pop("metrics")), "it has no metrics", False),
    "no_format_marker": (_doc_damage(lambda d: d.pop("perfgate_baseline")), "format marker missing", False),
    "not_utf8": (lambda good: b"\xff\xfe" + good, "not UTF-8", True),
}


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _assert_damaged_reports(out, damaged_name, needle, *, byte_offset, html=True):
    """Every report exists, parses, names the damaged file and says DAMAGED_BASELINE, not a pass."""
    doc = json.loads((out / "perfgate-result.json").read_text())
    assert doc["verdict"] == "DAMAGED_BASELINE" == terms.DAMAGED and doc["verdict"] != terms.NO_BASELINE
    assert doc["exit_code"] == 5 and doc["comparisons"] == []
    err = doc["error"]
    assert err["path"].endswith(damaged_name) and needle in err["message"] and err["hint"]
    assert (err["byte_offset"] is not None) is byte_offset
    # the candidate was read: its self-checks are still reported
    assert doc["self_checks"] and all(c["status"] != "fail" for c in doc["self_checks"])

    xml = JUnitXml.fromfile(str(out / "perfgate-junit.xml"))
    suites = {s.name: s for s in xml}
    assert len(list(suites["perfgate.self_checks"])) >= 1
    (case,) = [c for c in suites["perfgate.metrics"] if c.classname == "perfgate.baseline"]
    (res,) = case.result
    assert isinstance(res, Error) and not isinstance(res, Skipped)
    assert "baseline store is damaged" in res.message and needle in res.message
    assert damaged_name in res.text and "Nothing was judged" in res.text and "hint:" in res.text
    assert suites["perfgate.metrics"].errors == 1

    md = (out / "perfgate-report.md").read_text()
    assert "**DAMAGED_BASELINE**" in md and "The baseline store is damaged" in md and needle in md
    assert damaged_name in md and "this is not a pass" in md and "NO_BASELINE" not in md
    if html:
        page = (out / "r.html").read_text()
        assert "DAMAGED_BASELINE" in page and damaged_name in page and "this is not a pass" in page
        assert 'class="invalid"' in page


@pytest.mark.parametrize("kind", sorted(DAMAGES))
def test_damaged_baseline_file_writes_every_report_and_exits_5(tmp_path, store, kind):
    d, cand = store
    damage, needle, has_offset = DAMAGES[kind]
    bl = tmp_path / "bl"
    bl.mkdir()
    (bl / "main.json").write_bytes(damage((d / "bl" / "main.json").read_bytes()))
    before = _digest(bl)
    for extra in ([], ["--no-baseline-ok"]):   # --no-baseline-ok forgives a missing baseline, never a damaged one
        out = tmp_path / f"o{len(extra)}"
        code, text = run("check", "--baseline", "main", cand, "--baseline-dir", bl, "--out", out,
                         "--html", out / "r.html", *extra)
        assert code == 5, text
        assert "DAMAGED_BASELINE (exit 5)" in text and "main.json" in text and needle in text
        assert "NO_BASELINE" not in text and "the baseline store is damaged" in text
        _assert_damaged_reports(out, "main.json", needle, byte_offset=has_offset)
    assert _digest(bl) == before   # nothing written to the store


def test_damaged_baseline_reports_name_the_byte_offset_and_line(tmp_path, store):
    """Where the damage is known, the reports say where: the byte offset (and the line in the message)."""
    d, cand = store
    good = (d / "bl" / "main.json").read_bytes()
    bl = tmp_path / "bl"
    bl.mkdir()
    cut = good.index(b",\n", 3000) + 2   # cut between two values: the parser stops at the end of the file
    (bl / "main.json").write_bytes(good[:cut])
    code, text = run("check", "--baseline", "main", cand, "--baseline-dir", bl, "--out", tmp_path / "o")
    assert code == 5
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    line = good[:cut].count(b"\n") + 1
    assert doc["error"]["byte_offset"] == cut and f"(line {line}, column" in doc["error"]["message"]
    assert f"main.json byte {cut}" in (tmp_path / "o" / "perfgate-report.md").read_text()
    assert f"main.json byte {cut}" in (tmp_path / "o" / "perfgate-junit.xml").read_text()
    assert f"main.json byte {cut}" in text


@pytest.mark.parametrize("kind", ["truncated", "not_sqlite"])
def test_damaged_history_database_writes_every_report_and_exits_5(tmp_path, store, kind):
    d, cand = store
    good = (d / "h.sqlite").read_bytes()
    db = tmp_path / f"{kind}.sqlite"
    db.write_bytes(good[: len(good) // 2] if kind == "truncated" else b"not a database" * 100)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for extra in ([], ["--no-baseline-ok"]):
        out = tmp_path / f"o{len(extra)}"
        code, text = run("check", "--baseline", "history:main", cand, "--db", db, "--out", out,
                         "--html", out / "r.html", *extra)
        assert code == 5 and "internal error" not in text, text
        assert "DAMAGED_BASELINE (exit 5)" in text and db.name in text and "NO_BASELINE" not in text
        _assert_damaged_reports(out, db.name, "history database is damaged", byte_offset=False)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    # SQLite's read-only open of a WAL database leaves its -wal / -shm side files (as for a healthy
    # database); no transaction is written into them
    left = {p.name for p in tmp_path.iterdir()} - {"o0", "o1", db.name}
    assert left <= {db.name + "-wal", db.name + "-shm"}
    assert not (tmp_path / (db.name + "-wal")).exists() or (tmp_path / (db.name + "-wal")).stat().st_size == 0


def test_damaged_store_with_json_to_stdout(tmp_path, store):
    """--json -: the JSON goes to stdout with status DAMAGED_BASELINE; JUnit and Markdown are still files."""
    d, cand = store
    bl = tmp_path / "bl"
    bl.mkdir()
    (bl / "main.json").write_text("{not json")
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cand), "--baseline-dir", str(bl), "--out",
                                  str(tmp_path / "o"), "--json", "-"], env={}, catch_exceptions=False)
    assert r.exit_code == 5
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "DAMAGED_BASELINE" and doc["error"]["path"].endswith("main.json")
    assert (tmp_path / "o" / "perfgate-junit.xml").is_file() and (tmp_path / "o" / "perfgate-report.md").is_file()


def test_missing_baseline_behaves_as_before(tmp_path, store):
    """A missing baseline stays NO_BASELINE: exit 4, a <skipped> testcase; 0 with --no-baseline-ok."""
    _, cand = store
    for extra, want in (([], 4), (["--no-baseline-ok"], 0)):
        out = tmp_path / f"o{want}"
        code, text = run("check", "--baseline", "main", cand, "--baseline-dir", tmp_path / "empty", "--out", out,
                         *extra)
        assert code == want and "NO_BASELINE" in text and "DAMAGED" not in text and "damaged" not in text, text
        doc = json.loads((out / "perfgate-result.json").read_text())
        assert doc["verdict"] == "NO_BASELINE" and doc["exit_code"] == want and doc["error"]["kind"] == "no_baseline"
        xml = JUnitXml.fromfile(str(out / "perfgate-junit.xml"))
        (case,) = [c for s in xml for c in s if c.classname == "perfgate.baseline"]
        assert isinstance(case.result[0], Skipped)
        md = (out / "perfgate-report.md").read_text()
        assert "No usable baseline" in md and "damaged" not in md
    assert not (tmp_path / "empty").exists()


def test_damaged_store_reaches_the_job_summary_and_step_outputs(tmp_path, store):
    """In GitHub Actions the Markdown goes to the job summary and the verdict to the step outputs
    (the PR comment takes the same path), so a damaged store is visible there, exit 5."""
    _, cand = store
    bl = tmp_path / "bl"
    bl.mkdir()
    (bl / "main.json").write_text("{not json")
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs.txt"
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cand), "--baseline-dir", str(bl), "--out",
                                  str(tmp_path / "o")],
                           env={"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs)},
                           catch_exceptions=False)
    assert r.exit_code == 5, r.output
    assert "**DAMAGED_BASELINE**" in summary.read_text() and "main.json" in summary.read_text()
    lines = outputs.read_text().splitlines()
    assert "verdict=DAMAGED_BASELINE" in lines and "exit-code=5" in lines


def test_baseline_store_that_is_a_regular_file_is_damaged_not_missing(tmp_path, store):
    """PERFGATE_BASELINE_DIR naming a regular file is a damaged store (exit 5, reports written,
    not forgiven by --no-baseline-ok), not NO_BASELINE (exit 0 with
    --no-baseline-ok); --baseline-dir naming it is the same (was: click's usage error, exit 2, no
    reports). The file is left as it was."""
    _, cand = store
    f = tmp_path / "bl"
    f.write_text("not a folder")
    for extra in ([], ["--no-baseline-ok"], ["--baseline-dir", str(f)]):
        out = tmp_path / f"o{len(extra)}"
        r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cand), "--out", str(out), *extra],
                               env={"PERFGATE_BASELINE_DIR": str(f) if "--baseline-dir" not in extra else ""},
                               catch_exceptions=False)
        assert r.exit_code == 5 and "DAMAGED_BASELINE" in r.output and "not a folder" in r.output, r.output
        doc = json.loads((out / "perfgate-result.json").read_text())
        assert doc["verdict"] == "DAMAGED_BASELINE" and doc["error"]["path"].endswith("bl")
        xml = JUnitXml.fromfile(str(out / "perfgate-junit.xml"))
        (case,) = [c for s in xml for c in s if c.classname == "perfgate.baseline"]
        assert isinstance(case.result[0], Error)
    assert f.read_text() == "not a folder"


@pytest.mark.parametrize("kind", ["directory", "under_a_file", "sqlite_cannot_open"])
def test_history_database_that_cannot_be_opened_is_a_store_error_not_damage(tmp_path, store, monkeypatch, kind):
    """A history database that cannot be opened (the default path a directory, a path under a
    regular file, a file SQLite cannot open) is named as the history commands name it, a store
    error (STORE_ERROR, exit 5, JUnit <error type="store_error">), never DAMAGED_BASELINE and never
    "damaged" in any report; --no-baseline-ok does not pass it (before: DAMAGED_BASELINE "the
    baseline store is damaged" for the directory and SQLite's "cannot open", NO_BASELINE (exit
    0 with --no-baseline-ok) under a regular file)."""
    d, cand = store
    monkeypatch.chdir(tmp_path)
    db_args, needle = [], ""
    if kind == "directory":   # the default ./perfgate-history.sqlite
        (tmp_path / "perfgate-history.sqlite").mkdir()
        name, needle = "perfgate-history.sqlite", "the history database path is a directory"
    elif kind == "under_a_file":
        (tmp_path / "afile").write_text("x")
        name, needle = "afile/h.sqlite", "cannot open the history database: "
        db_args = ["--db", tmp_path / "afile" / "h.sqlite"]
    else:
        import sqlite3

        from perfgate.history.store import HistoryStore

        def cannot_open(self, timeout):
            raise sqlite3.OperationalError("unable to open database file")
        monkeypatch.setattr(HistoryStore, "_open_reader", cannot_open)
        name, needle = "h.sqlite", "cannot open the history database: unable to open database file"
        db_args = ["--db", d / "h.sqlite"]
    for extra in ([], ["--no-baseline-ok"]):
        out = tmp_path / f"o{len(extra)}"
        code, text = run("check", "--baseline", "history:main", cand, *db_args, "--out", out,
                         "--html", out / "r.html", *extra)
        assert code == 5 and "STORE_ERROR (exit 5)" in text and needle in text, text
        assert "the baseline store cannot be opened" in text
        doc = json.loads((out / "perfgate-result.json").read_text())
        assert doc["verdict"] == "STORE_ERROR" == terms.STORE_ERROR and doc["exit_code"] == 5
        assert doc["error"]["kind"] == "store_error" and doc["error"]["path"].endswith(name)
        assert needle in doc["error"]["message"] and doc["comparisons"] == []
        xml = JUnitXml.fromfile(str(out / "perfgate-junit.xml"))
        (case,) = [c for s in xml for c in s if c.classname == "perfgate.baseline"]
        (res,) = case.result
        assert isinstance(res, Error) and res.type == "store_error"
        assert res.message.startswith("baseline store cannot be opened: ") and needle in res.message
        md = (out / "perfgate-report.md").read_text()
        assert "**STORE_ERROR**" in md and "The baseline store cannot be opened" in md and name in md
        page = (out / "r.html").read_text()
        assert "STORE_ERROR" in page and "cannot be opened" in page and 'class="invalid"' in page
        for t in (text, md, page, (out / "perfgate-junit.xml").read_text(), json.dumps(doc)):
            assert "damaged" not in t.lower() and "NO_BASELINE" not in t
