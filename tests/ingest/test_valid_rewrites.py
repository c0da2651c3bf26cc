"""Rewrites of a real capture that lose nothing stay valid: the checks that refuse files which
disagree must not refuse these. Each rewrites every CSV table of a copy of level1 (kernel
table, step_trace_time.csv, op_statistic.csv) and is saved as a baseline (exit 0):

* data rows shuffled: the same fingerprint as the intact capture;
* durations written in E notation that keeps every digit (53.741 as 5.3741E+01): the same
  fingerprint;
* a byte-order mark and CRLF line endings: the same fingerprint;
* durations rounded to 2 decimals: valid, and ``check`` against the intact baseline passes.
"""
from __future__ import annotations

import csv
import io
import json
import random
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture
from _refusals import saved_main

pytestmark = pytest.mark.real

_TABLES = ("kernel_details.csv", "step_trace_time.csv", "op_statistic.csv")
_DURATIONS = ("Duration(us)",)


def _rewrite(cap: Path, edit, *, bom: bool = False, crlf: bool = False) -> None:
    """Every table of :data:`_TABLES` in every rank of ``cap`` read, ``edit(name, header, rows)``
    applied (in place), and written back (with a BOM / CRLF line endings when asked)."""
    for out in sorted(cap.glob("rank*_ascend_pt/ASCEND_PROFILER_OUTPUT")):
        for name in _TABLES:
            p = out / name
            header, *rows = list(csv.reader(io.StringIO(p.read_text(encoding="utf-8-sig"), newline="")))
            edit(name, header, rows)
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\r\n" if crlf else "\n").writerows([header, *rows])
            p.write_text(("\ufeff" if bom else "") + buf.getvalue(), encoding="utf-8", newline="")


def _values(cap: Path, policy) -> dict:
    """{metric key: value} of the capture's fingerprint (what a comparison judges); no self-check
    may fail."""
    fp = fingerprint_capture(load_capture(cap), policy)
    assert not [c for c in fp.self_checks if c.status == "fail"], [c.message for c in fp.self_checks
                                                                    if c.status == "fail"]
    d = json.loads(json.dumps(fp.to_dict(), default=str))
    return {k: m["value"] for k, m in d["metrics"].items()}


def _shuffle(name, header, rows):
    rows[:] = random.Random(7).sample(rows, len(rows))


def _e_notation(name, header, rows):
    """53.741 -> 5.3741E+01, 0.02 -> 2E-02: the same decimal value, every digit kept."""
    if name != "kernel_details.csv":
        return
    i = header.index("Duration(us)")
    for r in rows:
        d = Decimal(r[i].strip())
        if d:
            sign, digits, exp = d.normalize().as_tuple()
            mant = "".join(map(str, digits))
            e = exp + len(digits) - 1
            r[i] = f"{mant[0]}{'.' + mant[1:] if len(mant) > 1 else ''}E{'+' if e >= 0 else '-'}{abs(e):02d}"
            assert Decimal(r[i]) == d


def _round2(name, header, rows):
    if name != "kernel_details.csv":
        return
    i = header.index("Duration(us)")
    for r in rows:
        r[i] = f"{Decimal(r[i].strip()):.2f}"


@pytest.mark.parametrize("edit, fmt", [
    (_shuffle, {}),
    (_e_notation, {}),
    (lambda *a: None, {"bom": True, "crlf": True}),
], ids=["shuffled-rows", "e-notation", "bom-crlf"])
def test_rewrites_that_lose_nothing_keep_the_fingerprint(copy_capture, tmp_path, policy, edit, fmt):
    intact = _values(copy_capture("level1", "intact"), policy)
    cap = copy_capture("level1", "rewritten")
    kd = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    before = kd.read_bytes()
    _rewrite(cap, edit, **fmt)
    assert kd.read_bytes() != before
    assert _values(cap, policy) == intact
    saved_main(cap, tmp_path / "bl")


def test_durations_rounded_to_two_decimals_stay_valid(copy_capture, tmp_path, policy):
    """Every Duration(us) of the kernel table rounded to 2 decimals (0.005 us at most per row):
    within every self-check's per-row tolerance, saved, and ``check`` against the intact
    baseline passes."""
    bl = saved_main(copy_capture("level1", "intact"), tmp_path / "bl")
    cap = copy_capture("level1", "rounded")
    _rewrite(cap, _round2)
    _values(cap, policy)
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cap), "--baseline-dir", str(bl),
                                  "--out", str(tmp_path / "out")], env={})
    assert r.exit_code == 0, r.output


def test_durations_rounded_the_same_way_in_every_row_stay_valid(copy_capture, policy):
    """The worst case of a 2-decimal re-save: every compute Duration ends in 4 at its third
    decimal (op_statistic written from those values, as the profiler would), so rounding takes
    0.004 us from every row and a type of N rows loses 0.004·N us, past the 0.001 us a row of a
    3-decimal table. The rounding its writer added is within op_statistic's check (the step of
    the written decimals: 0.005 us a row) and the capture stays valid. Timeline and step trace
    are left out: only the kernel table and op_statistic are compared."""
    from _edits import restate_op_statistic
    cap = copy_capture("level1", "rounded_down")
    for p in [*cap.rglob("trace_view.json"), *cap.rglob("step_trace_time.csv")]:
        p.unlink()

    def ends_in_4(name, header, rows):
        if name == "kernel_details.csv":
            i, n = header.index("Duration(us)"), header.index("Name")
            for r in rows:
                if not r[n].startswith("hcom"):   # communication.json times its collectives
                    d = (Decimal(r[i].strip()) * 100).to_integral_value(rounding="ROUND_FLOOR") / 100
                    r[i] = f"{d + Decimal('0.004'):.3f}"
    for out in sorted(cap.glob("rank*_ascend_pt/ASCEND_PROFILER_OUTPUT")):
        _rewrite_one(out / "kernel_details.csv", ends_in_4)
        restate_op_statistic(out)
    _values(cap, policy)
    for out in sorted(cap.glob("rank*_ascend_pt/ASCEND_PROFILER_OUTPUT")):
        _rewrite_one(out / "kernel_details.csv", _round2_compute)
    _values(cap, policy)


def _round2_compute(name, header, rows):
    i, n = header.index("Duration(us)"), header.index("Name")
    for r in rows:
        if not r[n].startswith("hcom"):
            r[i] = f"{Decimal(r[i].strip()):.2f}"


def _rewrite_one(p: Path, edit) -> None:
    header, *rows = list(csv.reader(io.StringIO(p.read_text(encoding="utf-8-sig"), newline="")))
    edit(p.name, header, rows)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, *rows])
    p.write_text(buf.getvalue(), encoding="utf-8", newline="")
