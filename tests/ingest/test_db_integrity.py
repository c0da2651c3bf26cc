"""The DB export held to the text export's rules: swapped rank folders, two devices in one export,
a task without a name and tasks inserted twice are refused or counted as the kernel_details.csv
rows would be."""
from __future__ import annotations

import json
import shutil

import pytest

from _cli import run


def _db_level1(ascend, tmp_path):
    cap = tmp_path / "db"
    shutil.copytree(ascend / "msinsight/test/data/pytorch/db/level1", cap)
    return cap


def test_swapped_db_output_folders_are_refused(ascend, tmp_path):
    """db/level1 with the two ranks' ASCEND_PROFILER_OUTPUT folders swapped (profiler_info files
    stay): rank 0's folder held ascend_pytorch_profiler_1.db (RANK_DEVICE_MAP [(1, 1)]) and was
    read as rank 0 (exit 0, rank 1's warnings reported as rank 0's). Now exit 3 naming both facts."""
    cap = _db_level1(ascend, tmp_path)
    a, b = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT", cap / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT"
    a.rename(tmp_path / "o0")
    b.rename(a)
    (tmp_path / "o0").rename(b)
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "ascend_pytorch_profiler_1.db: holds another rank than its folder: its file name says rank 1; " \
           "RANK_DEVICE_MAP says rank 1, the folder rank 0" in r.output


def test_a_db_export_of_two_devices_is_refused(ascend, tmp_path):
    """Half of a DB export's TASK rows on deviceId 1: summed into one rank (exit 0), while the
    same in kernel_details.csv is exit 3 ("holds 2 devices in one rank folder")."""
    import sqlite3
    cap = _db_level1(ascend, tmp_path)
    db = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(db)
    con.execute("update TASK set deviceId = 1 where rowid % 2 = 0")
    con.commit()
    con.close()
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3 and "TASK holds 2 devices in one rank folder (deviceId 0, 1)" in r.output, r.output


@pytest.mark.parametrize("empty", ["''", "'N/A'"])
def test_a_db_task_without_a_name_is_refused_as_the_csv_row_is(ascend, tmp_path, empty):
    """A DB export whose kernel name string is empty: ``check`` / ``fingerprint`` were internal
    errors (exit 70, "'list' argument must have no negative elements" in the family view). The
    text export's empty Name cell is exit 3 "Name is empty": so is this, naming the DB."""
    import shutil
    import sqlite3
    cap = tmp_path / "db1"
    shutil.copytree(ascend / "msinsight/test/data/pytorch/db/level1", cap)
    db = next(cap.rglob("ascend_pytorch_profiler_0.db"))
    con = sqlite3.connect(db)
    con.execute(f"update STRING_IDS set value={empty} where id=(select name from COMPUTE_TASK_INFO limit 1)")
    con.commit()
    con.close()
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "a task has no name" in r.output and db.name in r.output


def test_db_tasks_inserted_twice_are_counted_once_as_csv_rows_are(ascend, tmp_path):
    """``insert into TASK select * from TASK`` in both rank DBs: check said REGRESSION (196
    failing metrics, layer count 5 -> 10). The text export's exact duplicate rows are counted
    once with a warning: so are the DB's tasks, and the capture gates unchanged against itself."""
    import shutil
    import sqlite3
    src = ascend / "msinsight/test/data/pytorch/db/level1"
    cap = tmp_path / "db1"
    shutil.copytree(src, cap)
    for db in cap.rglob("ascend_pytorch_profiler_*.db"):
        con = sqlite3.connect(db)
        con.execute("insert into TASK select * from TASK")
        con.commit()
        con.close()
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", "--baseline-dir", bl, src).exit_code == 0
    r = run("check", "--baseline", "b", "--baseline-dir", bl, "--out", tmp_path / "o", cap)
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "o/perfgate-result.json").read_text())
    assert "exact duplicate task(s) (same start, stream, name, duration) counted once" in json.dumps(res)
