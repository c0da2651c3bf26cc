"""write_atomic interrupted mid-write (Ctrl-C, the CLI's SIGTERM exception): the previous file
is kept and no hidden ``.<name>.*.tmp`` is left beside it (4 of 4 interrupted
``baseline save`` / ``check`` runs left one in the baseline store or the reports folder)."""
from __future__ import annotations

import os

import pytest

import perfgate.store.atomic as atomic
from perfgate.store.atomic import write_atomic


class Terminated(BaseException):
    """Stands for the CLI's SIGTERM exception (a BaseException, like KeyboardInterrupt)."""


@pytest.mark.parametrize("exc", [KeyboardInterrupt, Terminated])
@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_an_interrupted_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch, exc, where):
    target = tmp_path / "baselines" / "main.json"
    write_atomic(target, "old")

    def interrupted(*a, **k):
        raise exc()
    monkeypatch.setattr(atomic.os, where, interrupted)
    with pytest.raises(exc):
        write_atomic(target, b"new" * 1000)
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert sorted(os.listdir(target.parent)) == ["main.json"]


def test_an_os_error_still_is_a_store_error_without_temp(tmp_path, monkeypatch):
    target = tmp_path / "r.md"

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(atomic.StoreError, match="previous content kept"):
        write_atomic(target, "x")
    assert os.listdir(tmp_path) == []
