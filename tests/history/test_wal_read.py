"""Reading the history database leaves its folder as it was: a
read-only open of a WAL-mode database used to leave an empty ``-wal`` and a 32 KiB ``-shm`` beside it."""
import hashlib
import sqlite3

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.history.store import HistoryStore
from perfgate.synth import SynthSpec, write_capture


@pytest.fixture(scope="module")
def wal_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("walread")
    caps = [write_capture(root / f"c{i}", SynthSpec(seed=i)) for i in range(3)]   # a checked run is left out of its pool
    db = root / "h" / "history.sqlite"
    for i, cap in enumerate(caps):
        r = CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--db", str(db),
                                      "--commit", f"{i + 1:040x}"], env={})
        assert r.exit_code == 0, r.output
    return db, caps


def _state(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_reads_leave_no_side_files_and_the_database_byte_identical(wal_db, tmp_path):
    db, caps = wal_db
    probe = sqlite3.connect(db)
    assert probe.execute("pragma journal_mode").fetchone()[0] == "wal"
    probe.close()
    before = _state(db.parent)
    assert list(before) == ["history.sqlite"]   # the writer closed: no side files to begin with
    runs = [
        ["history", "runs", "--db", str(db)],
        ["history", "query", "--metric", "step.time_us{view=p50}", "--db", str(db), "--format", "json"],
        ["check", "--baseline", "history:main", str(caps[1]), "--history", str(db), "--out", str(tmp_path / "o1")],
        ["check", "--baseline", "history:main", str(caps[0]), "--history", str(db), "--out", str(tmp_path / "o2"),
         "--html", str(tmp_path / "r.html")],
    ]
    for args in runs:
        r = CliRunner().invoke(main, args, env={})
        assert r.exit_code in (0, 1), (args, r.output)
        assert _state(db.parent) == before, args
    assert '"value"' in CliRunner().invoke(main, runs[1], env={}).output   # the query did read values
    hs = HistoryStore(db, readonly=True)   # the library object: closing it tidies too
    assert len(hs.runs()) == 3
    assert (db.parent / "history.sqlite-shm").exists()   # SQLite's read-only open made them ...
    hs.close()
    assert _state(db.parent) == before                  # ... and close removed them


def test_a_writer_open_meanwhile_keeps_its_side_files(wal_db):
    db, _ = wal_db
    hs = HistoryStore(db, readonly=True)
    writer = sqlite3.connect(db)                       # another process's connection opens during the read
    writer.execute("select count(*) from runs").fetchone()
    hs.close()
    assert (db.parent / "history.sqlite-wal").exists() and (db.parent / "history.sqlite-shm").exists()
    assert writer.execute("select count(*) from runs").fetchone()[0] == 3
    writer.close()                                      # the last connection: SQLite removes them itself
    assert sorted(p.name for p in db.parent.iterdir()) == ["history.sqlite"]


@pytest.mark.parametrize("folder", ["ci#7", "what?"])
def test_a_history_database_in_a_folder_with_uri_characters_reads_and_leaves_it_as_it_was(tmp_path, folder):
    """The read-only open was ``file:{path}?mode=ro``: a ``#`` / ``?`` in a folder name cut the
    path there ('unable to open database file', or another file opened)."""
    cap = write_capture(tmp_path / "c", SynthSpec(seed=1))
    db = tmp_path / folder / "history.sqlite"
    r = CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--db", str(db),
                                  "--commit", f"{1:040x}"], env={})
    assert r.exit_code == 0, r.output
    before = _state(db.parent)
    r = CliRunner().invoke(main, ["history", "runs", "--db", str(db)], env={})
    assert r.exit_code == 0, r.output
    assert f"{1:040x}"[:7] in r.output
    assert _state(db.parent) == before
