"""``history record`` on a history database damaged away from the pages it reads (bytes of the
metric-value pages overwritten) is a store error (exit 5) naming SQLite's complaint, and leaves
the file as it was. Before, the duplicate lookup read an intact page and the command exited 0
("already recorded") on a file that ``check`` calls damaged (fresh-user report)."""
import pytest

from perfgate.errors import EXIT_STORE, StoreError
from perfgate.gate import record_history
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
    record_history(cap, policy=pol, history_path=db, branch="main")
    HistoryStore(db).close()                       # checkpoint the WAL into the file
    for side in ("-wal", "-shm"):
        (tmp_path / f"h.sqlite{side}").unlink(missing_ok=True)
    _damage_last_pages(db)
    before = db.read_bytes()
    nxt = cap if again == "same capture" else write_capture(tmp_path / "c1", SynthSpec(seed=1))
    with pytest.raises(StoreError) as e:
        record_history(nxt, policy=pol, history_path=db, branch="main")
    assert e.value.exit_code == EXIT_STORE
    assert "history database is damaged" in e.value.message and "quick_check" in e.value.message
    assert db.read_bytes() == before
    if again == "same capture":       # the damage is one the duplicate lookup alone does not see
        import perfgate.history.store as st
        mp = pytest.MonkeyPatch()
        mp.setattr(st.HistoryStore, "require_intact", lambda self: None)
        try:
            assert record_history(nxt, policy=pol, history_path=db, branch="main").duplicate
        finally:
            mp.undo()


def test_intact_database_records_and_finds_duplicates(tmp_path):
    pol = load_policy()
    db = tmp_path / "h.sqlite"
    cap = write_capture(tmp_path / "c0", SynthSpec())
    first = record_history(cap, policy=pol, history_path=db, branch="main")
    again = record_history(cap, policy=pol, history_path=db, branch="main")
    assert not first.duplicate and again.duplicate and again.run_id == first.run_id
