"""A control character (NUL, ESC, ...) inside a kernel table's text cell (Name, Type, Accelerator
Core, Stream ID) is a damaged file: exit 3 naming file, row, column and the cell, never a
"new kernel family" regression whose name the JUnit XML must drop (a NUL
in row 9's Name gave exit 1 and a JUnit failure naming a family the baseline has)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from _refusals import assert_refused_everywhere
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.kernels import read_kernels


def _poison(cap, column: str, row: int, char: str):
    """Insert ``char`` into the middle of the cell of ``column`` in data row ``row`` of rank 0."""
    import csv
    f = next(cap.rglob("rank0*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    rows = list(csv.reader(f.open(newline="", encoding="utf-8")))
    j = rows[0].index(column)
    cell = rows[row][j]
    rows[row][j] = cell[:2] + char + cell[2:]
    with f.open("w", newline="", encoding="utf-8") as out:
        csv.writer(out).writerows(rows)
    return f, rows[row][j]


@pytest.mark.parametrize("column,char", [("Name", "\x00"), ("Name", "\x1b"), ("Type", "\x07"),
                                         ("Accelerator Core", "\x00"), ("Stream ID", "\x7f")])
def test_a_control_character_in_a_text_cell_is_an_invalid_capture(copy_capture, column, char):
    cap = copy_capture("level2")
    f, cell = _poison(cap, column, 9, char)
    with pytest.raises(InvalidCaptureError) as e:
        read_kernels(f, pmu=True)
    msg = str(e.value)
    assert e.value.row == 9 and column in msg and repr(cell) in msg and "control character" in msg


def test_check_exits_3_and_names_the_cell(copy_capture, tmp_path):
    base, cand = copy_capture("level1"), copy_capture("level2")
    _poison(cand, "Name", 9, "\x00")
    r = CliRunner()
    assert r.invoke(main, ["baseline", "save", "--name", "main", "--baseline-dir", str(tmp_path / "b"),
                           str(base)]).exit_code == 0
    res = r.invoke(main, ["check", "--baseline", "main", "--baseline-dir", str(tmp_path / "b"),
                          "--out", str(tmp_path / "out"), str(cand)])
    assert res.exit_code == 3, res.output
    assert "row 9: Name holds a control character" in res.output and "\\x00" in res.output
    assert "\x00" not in (tmp_path / "out" / "perfgate-report.md").read_text()


def test_tabs_and_ordinary_text_pass(copy_capture):
    cap = copy_capture("level2")
    f, _ = _poison(cap, "Name", 9, "\t")   # TAB, LF, CR are not refused (text a CSV can hold)
    read_kernels(f, pmu=True)


# -- the same refusal for communication.json op keys and the DB export's strings (only
# the CSV kernel tables refused them; one check, perfgate.ingest.kernels.
# refuse_control_characters)

def _comm_with_key(cap, char, where="op"):
    """Rename the first op of rank 0's communication.json (``where``: its op name, group or link)
    to hold ``char``; returns the file and the new key."""
    import json
    f = next(cap.rglob("rank0*/ASCEND_PROFILER_OUTPUT/communication.json"))
    doc = json.loads(f.read_text(encoding="utf-8"))
    step = next(iter(doc))
    kind = next(iter(doc[step]))
    ops = doc[step][kind]
    op = next(o for o in ops if o != "Total Op Info")
    if where == "link":
        ops[op]["Communication Bandwidth Info"]["HC" + char + "CS"] = {"Transit Size(MB)": 1.0,
                                                                       "Transit Time(ms)": 0.1}
        key = op
    else:
        name, _, group = op.partition("@")
        key = (name[:4] + char + name[4:] + "@" + group) if where == "op" else (name + "@" + group[:2] + char + group[2:])
        ops[key] = ops.pop(op)
    f.write_text(json.dumps(doc), encoding="utf-8")   # json escapes it: "\u0000", "\u001b"
    return f, step, kind, key


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f", "\x01"])
@pytest.mark.parametrize("where", ["op", "group", "link"])
def test_a_control_character_in_a_communication_json_key(tmp_path, char, where):
    from perfgate.ingest.comm import read_communication, read_communication_loop
    from perfgate.synth import SynthSpec, write_capture
    cap = write_capture(tmp_path / "c", SynthSpec(seed=4))
    f, step, kind, key = _comm_with_key(cap, char, where)
    for reader in (read_communication, read_communication_loop):
        with pytest.raises(InvalidCaptureError) as e:
            reader(f)
        msg = str(e.value)
        assert e.value.path == str(f) and "holds a control character" in msg, msg
        if where != "link":
            assert f"{step}.{kind}.{key!r}: the op name holds a control character" in msg, msg
        else:
            assert "Communication Bandwidth Info." in msg and "the link name" in msg, msg


def test_a_communication_json_key_with_a_tab_passes(tmp_path):
    from perfgate.ingest.comm import read_communication
    from perfgate.synth import SynthSpec, write_capture
    cap = write_capture(tmp_path / "c", SynthSpec(seed=4))
    f, *_ = _comm_with_key(cap, "\t")
    assert len(read_communication(f).ops)


def test_check_exits_3_on_a_control_character_in_communication_json(tmp_path):
    from perfgate.synth import SynthSpec, write_capture
    base = write_capture(tmp_path / "base", SynthSpec(seed=1, steps=2))
    cand = write_capture(tmp_path / "cand", SynthSpec(seed=2, steps=2))
    _, step, kind, key = _comm_with_key(cand, "\x00")
    r = CliRunner()
    bl = tmp_path / "b"
    assert r.invoke(main, ["baseline", "save", "--name", "main", "--baseline-dir", str(bl), str(base)],
                    env={}).exit_code == 0
    needle = f"communication.json: {step}.{kind}.{key!r}: the op name holds a control character"
    assert_refused_everywhere(cand, bl, tmp_path, [needle, "\\x00"])


from contextlib import closing


def _db_capture(ascend, tmp_path):
    import shutil
    dst = tmp_path / "db"
    shutil.copytree(ascend / "msinsight/test/data/pytorch/db/level1", dst)
    return dst, dst / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


@pytest.mark.real
@pytest.mark.parametrize("table,column,char", [("COMPUTE_TASK_INFO", "name", "\x00"),
                                               ("COMPUTE_TASK_INFO", "opType", "\x1b"),
                                               ("COMPUTE_TASK_INFO", "taskType", "\x7f"),
                                               ("COMMUNICATION_OP", "opName", "\x07")])
def test_a_control_character_in_a_db_kernel_string(ascend, tmp_path, table, column, char):
    import sqlite3
    from perfgate.ingest import load_capture
    cap, out = _db_capture(ascend, tmp_path)
    db = out / "ascend_pytorch_profiler_0.db"
    with closing(sqlite3.connect(db)) as con, con:   # closed: the DB is read with immutable=1
        sid = con.execute(f"select {column} from {table} limit 1 offset 3").fetchone()[0]
        value = con.execute("select value from STRING_IDS where id=?", (sid,)).fetchone()[0]
        bad = value[:2] + char + value[2:]
        con.execute("update STRING_IDS set value=? where id=?", (bad, sid))
    with pytest.raises(InvalidCaptureError) as e:
        load_capture(cap)
    msg = str(e.value)
    assert e.value.path == str(db) and e.value.row is not None, msg
    assert f"{column} holds a control character" in msg and repr(bad) in msg and f"STRING_IDS id {sid}" in msg, msg
    if table == "COMPUTE_TASK_INFO" or column != "opName":
        assert f"{table}.{column}" in msg, msg


@pytest.mark.real
def test_a_control_character_in_an_analysis_db_op_name(ascend, tmp_path):
    import sqlite3
    from perfgate.ingest import load_capture
    cap, out = _db_capture(ascend, tmp_path)
    with closing(sqlite3.connect(out / "analysis.db")) as con, con:
        con.execute("update CommAnalyzerTime set hccl_op_name = hccl_op_name || char(0) "
                    "where rowid = (select min(rowid) from CommAnalyzerTime)")
    with pytest.raises(InvalidCaptureError) as e:
        load_capture(cap)
    assert e.value.path == str(out / "analysis.db") and e.value.row == 1, str(e.value)
    assert "CommAnalyzerTime.hccl_op_name holds a control character" in str(e.value)
