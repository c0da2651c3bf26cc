"""``perfgate history record --workers N`` bounds the processes of per-rank work as ``check`` and
``baseline save`` do, and records what a run in this process records."""
from __future__ import annotations

import sqlite3

from click.testing import CliRunner

import perfgate.app.gate as gate
from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture


def _record(cap, db, *workers):
    return CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--commit", "c1",
                                     "--db", str(db), *workers], env={}, catch_exceptions=False)


def _values(db):
    con = sqlite3.connect(db)
    try:
        return sorted(con.execute("select key, value from metric_values").fetchall())
    finally:
        con.close()


def test_history_record_passes_workers_to_the_per_rank_work(tmp_path, monkeypatch):
    cap = write_capture(tmp_path / "cap", SynthSpec(ranks=4, steps=2))
    asked = []
    real = gate.fingerprint_path

    def spy(*a, **kw):
        asked.append(kw.get("workers"))
        return real(*a, **kw)
    monkeypatch.setattr(gate, "fingerprint_path", spy)
    r1 = _record(cap, tmp_path / "one.sqlite", "--workers", "1")
    r2 = _record(cap, tmp_path / "two.sqlite", "--workers", "2")
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    assert asked == [1, 2]
    assert _values(tmp_path / "one.sqlite") == _values(tmp_path / "two.sqlite") != []


def test_history_record_refuses_zero_workers(tmp_path):
    r = _record(tmp_path, tmp_path / "h.sqlite", "--workers", "0")
    assert r.exit_code == 2 and "--workers" in r.output
