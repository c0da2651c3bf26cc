"""``history record`` on a history database damaged away from the pages it reads (bytes of the
metric-value pages overwritten) is a store error (exit 5) naming SQLite's complaint, and leaves
the file as it was. Before, the duplicate lookup read an intact page and the command exited 0
("already recorded") on a file that ``check`` calls damaged."""
import pytest

from perfgate.errors import EXIT_STORE, StoreError
from perfgate.app.gate import HistoryEntry, record_history
from perfgate.history.store import HistoryStore
from perfgate.policy import load_policy
from perfgate.synth import SynthSpec, write_capture


def _damage_last_pages(db, pages=2, page=4096):
    data = bytearray(db.read_bytes())
    assert len(data) > 8 * page
    data[-pages * page:] = bytes((i * 37 + 11) % 251 for i in range(pages * page))
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("again", ["same capture", "new capture"])
def test_record_on_a_damaged_database_is_a_store_error(tmp_path, again):
    pol = load_policy()
    db = tmp_path / "h.sqlite"
    cap = write_capture(tmp_path / "c0", SynthSpec())
    record_history(cap, HistoryEntry("main"), policy=pol, history_path=db)
    HistoryStore(db).close()                       # checkpoint the WAL into the file
    for side in ("-wal", "-shm"):
        (tmp_path / f"h.sqlite{side}").unlink(missing_ok=True)
    _damage_last_pages(db)
    before = db.read_bytes()
    nxt = cap if again == "same capture" else write_capture(tmp_path / "c1", SynthSpec(seed=1))
    with pytest.raises(StoreError) as e:
        record_history(nxt, HistoryEntry("main"), policy=pol, history_path=db)
    assert e.value.exit_code == EXIT_STORE
    assert "history database is damaged" in e.value.message and "quick_check" in e.value.message
    assert db.read_bytes() == before
    if again == "same capture":       # the damage is one the duplicate lookup alone does not see
        import perfgate.history.store as st
        mp = pytest.MonkeyPatch()
        mp.setattr(st.HistoryStore, "require_intact", lambda self: None)
        try:
            assert record_history(nxt, HistoryEntry("main"), policy=pol, history_path=db).duplicate
        finally:
            mp.undo()


def test_intact_database_records_and_finds_duplicates(tmp_path):
    pol = load_policy()
    db = tmp_path / "h.sqlite"
    cap = write_capture(tmp_path / "c0", SynthSpec())
    first = record_history(cap, HistoryEntry("main"), policy=pol, history_path=db)
    again = record_history(cap, HistoryEntry("main"), policy=pol, history_path=db)
    assert not first.duplicate and again.duplicate and again.run_id == first.run_id


def test_reads_of_a_damaged_database_are_store_errors_never_internal_errors(tmp_path):
    """``history trend`` / ``report`` / ``query`` over a database whose metric-value pages are
    damaged: exit 5 naming SQLite's complaint (not pandas' wrapper with the query), never
    exit 70 "a bug in perfgate". Reads that do not reach the damage still answer."""
    from click.testing import CliRunner

    from perfgate.cli import main
    pol = load_policy()
    db = tmp_path / "h.sqlite"
    for seed in range(3):
        record_history(write_capture(tmp_path / f"c{seed}", SynthSpec(seed=seed)), HistoryEntry("main", commit=f"k{seed}"),
                       policy=pol, history_path=db)
    HistoryStore(db).close()
    for side in ("-wal", "-shm"):
        (tmp_path / f"h.sqlite{side}").unlink(missing_ok=True)
    import sqlite3
    con = sqlite3.connect(db)
    page = con.execute("pragma page_size").fetchone()[0]
    root = con.execute("select rootpage from sqlite_master where name = 'metric_values'").fetchone()[0]
    con.close()
    data = bytearray(db.read_bytes())
    data[(root - 1) * page:root * page] = bytes((i * 37 + 11) % 251 for i in range(page))
    db.write_bytes(bytes(data))
    run = lambda *a: CliRunner().invoke(main, list(map(str, a)), env={})
    for args in (("history", "trend", "--db", db), ("history", "report", "--db", db, "--out", tmp_path / "rep"),
                 ("history", "query", "--metric", "step.time_us{view=p50}", "--db", db)):
        r = run(*args)
        assert r.exit_code == EXIT_STORE, (args, r.output)
        assert "history database is damaged" in r.output and "malformed" in r.output, r.output
        assert "Execution failed on sql" not in r.output and "bug in perfgate" not in r.output
    r = run("history", "runs", "--db", db, "--format", "json")   # the runs table is intact
    assert r.exit_code == 0 and len(__import__("json").loads(r.output)) == 3, r.output
