"""Inputs a test builds from a copy of a capture, of the default policy or of a stored baseline: a
text replaced once, a step dropped from communication.json, a profiler_info option changed, every
task of raw msprof output scaled, op_statistic restated after durations were edited, a policy
with one line changed, a history database of three recorded runs."""
from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal
from pathlib import Path


def replace_once(path, old, new):
    """``path`` with its first ``old`` replaced by ``new``; ``old`` must be there."""
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def drop_comm_step(out, step):
    """communication.json without ``step`` (a file that lists a step the kernel table and
    step_trace_time.csv lack is another capture's: exit 3)."""
    p = out / "communication.json"
    if p.is_file():
        d = json.loads(p.read_text(encoding="utf-8"))
        d.pop(f"step{step}", None)
        p.write_text(json.dumps(d), encoding="utf-8")


def policy_with(tmp_path, old: str, new: str):
    """The built-in default.yaml with its one ``old`` replaced by ``new``, written to
    ``tmp_path/policy.yaml``; returns that path."""
    from importlib.resources import files
    text = (files("perfgate") / "policies" / "default.yaml").read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    p = tmp_path / "policy.yaml"
    p.write_text(text.replace(old, new), encoding="utf-8")
    return p


def scaled_msprof(ascend, tmp_path, name, factor):
    """A copy (``tmp_path/name``) of the real raw msprof output vllm_ascend_msprof/prof_unpack
    with every task ``factor`` times as long, its op_statistic restated from the scaled tasks
    (:func:`restate_op_statistic`); returns its path."""
    cap = tmp_path / name
    shutil.copytree(ascend / "vllm_ascend_msprof/prof_unpack", cap)
    for p in cap.rglob("op_summary_*.csv"):
        rows = list(csv.reader(p.open(newline="", encoding="utf-8")))
        i = rows[0].index("Task Duration(us)")
        for r in rows[1:]:
            r[i] = f"{float(r[i]) * factor:.3f}"
        with p.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(rows)
        restate_op_statistic(p.parent)
    return cap


#: (kernel table, its op type, core type and duration columns, op_statistic) of the text export and of raw msprof output
_TABLES = (("kernel_details.csv", "Type", "Accelerator Core", "Duration(us)", "op_statistic.csv"),
           ("op_summary_*.csv", "OP Type", "Task Type", "Task Duration(us)", "op_statistic_*.csv"))


def restate_op_statistic(output_dir) -> None:
    """After a test edited the Durations of a rank's kernel table, write its op_statistic as the
    profiler would have: each (OP Type, Core Type) row's Total / Min / Avg / Max Time(us) from
    that type's rows of the kernel table (Count unchanged), so the two files agree again."""
    output_dir = Path(output_dir)
    for table, op_col, core_col, dur_col, stat in _TABLES:
        durations: dict = {}
        for p in sorted(output_dir.glob(table)):
            rows = list(csv.reader(p.open(newline="", encoding="utf-8-sig")))
            io, ic, idur = (rows[0].index(c) for c in (op_col, core_col, dur_col))
            for r in rows[1:]:
                durations.setdefault((r[io].strip(), r[ic].strip()), []).append(Decimal(r[idur].strip()))
        for p in output_dir.glob(stat):
            rows = list(csv.reader(p.open(newline="", encoding="utf-8-sig")))
            h = rows[0]
            for r in rows[1:]:
                d = durations.get((r[h.index("OP Type")].strip(), r[h.index("Core Type")].strip()))
                if d:
                    for col, v in (("Total Time(us)", sum(d)), ("Min Time(us)", min(d)),
                                   ("Avg Time(us)", sum(d) / len(d)), ("Max Time(us)", max(d))):
                        r[h.index(col)] = f"{v:.3f}"
            with p.open("w", newline="", encoding="utf-8") as f:
                csv.writer(f).writerows(rows)


def history_of_three_runs(tmp_path, store):
    """A history database (``tmp_path/h/hist.sqlite``) holding the fingerprint of ``store``'s
    baseline ``l1`` recorded three times on main; returns ``(db path, fingerprint)``."""
    from perfgate.history.store import HistoryStore
    fp = store.load("l1")[0]
    db = tmp_path / "h" / "hist.sqlite"
    hs = HistoryStore(db)
    for i in range(3):
        hs.record(fp, branch="main", commit=f"{i:040x}", recorded_at=f"2026-01-0{i + 1}T00:00:00+00:00")
    hs.close()
    return db, fp


def set_cell(path, row: int, column: str, value: str) -> None:
    """Set one cell of a CSV file (``row``: 1-based data row), keeping every other byte's meaning."""
    import csv
    import io
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    rows[row][rows[0].index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


# a one-rank, one-step synthetic capture whose step anatomy is known exactly (no jitter, fixed gaps)
EXACT = dict(ranks=1, steps=1, jitter=0.0, gap_dist="fixed", gap_us=3.0, prelaunch_us=500.0, tail_us=100.0)


def edit_profiler_info(cap, change, ranks=None):
    """Apply ``change(doc)`` to the parsed profiler_info_<N>.json of every rank folder of ``cap``
    (or of the ranks in ``ranks``) and write it back."""
    for p in sorted(cap.glob("*/profiler_info_*.json")):
        if ranks is None or int(p.stem.rsplit("_", 1)[1]) in ranks:
            doc = json.loads(p.read_text(encoding="utf-8"))
            change(doc)
            p.write_text(json.dumps(doc), encoding="utf-8")
