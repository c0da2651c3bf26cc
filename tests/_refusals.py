"""One assertion for the bad-capture tests: every command that would write refuses the capture.

``check``, ``baseline save`` and ``history record`` all exit 3 with each of ``needles`` in their
message, no baseline is added to the store (only ``main.json`` stays) and no run reaches the
history database (created empty at most)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from click.testing import CliRunner

from perfgate.cli import main


def assert_refused_everywhere(capture, bl: Path, tmp: Path, needles, args=()) -> None:
    """``args``: options given to each of the three commands (e.g. ``["--trace", "never"]``)."""
    needles = [needles] if isinstance(needles, str) else list(needles)
    r = CliRunner()
    res = r.invoke(main, ["check", "--baseline", "main", str(capture), "--baseline-dir", str(bl),
                          "--out", str(tmp / "out"), *args], env={})
    assert res.exit_code == 3 and all(n in res.output for n in needles), (needles, res.output)
    res = r.invoke(main, ["baseline", "save", "--name", "odd", str(capture), "--baseline-dir", str(bl), *args], env={})
    assert res.exit_code == 3 and all(n in res.output for n in needles), (needles, res.output)
    assert sorted(p.name for p in bl.iterdir()) == ["main.json"]
    db = tmp / "hist" / "h.sqlite"
    res = r.invoke(main, ["history", "record", str(capture), "--branch", "main", "--db", str(db), *args], env={})
    assert res.exit_code == 3 and all(n in res.output for n in needles), (needles, res.output)
    if db.exists():
        with sqlite3.connect(db) as con:
            tables = [t for (t,) in con.execute("select name from sqlite_master where type='table'")]
            assert all(con.execute(f"select count(*) from [{t}]").fetchone()[0] == 0 for t in tables)


def saved_main(capture, bl: Path) -> Path:
    """``perfgate baseline save --name main CAPTURE --baseline-dir BL`` (must succeed): the
    intact baseline the refusal tests check a damaged capture against. Returns ``bl``."""
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(capture), "--baseline-dir", str(bl)],
                           env={})
    assert r.exit_code == 0, r.output
    return bl
