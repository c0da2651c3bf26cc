"""numpy's huge-page hint is turned off for a command only where the kernel would stall on it
(perfgate.hostmem), the user's NUMPY_MADVISE_HUGEPAGE wins, and everything is restored after."""
import os

import pytest

from perfgate import hostmem

np_ma = pytest.importorskip("numpy._core.multiarray")


def _defrag(tmp_path, text):
    p = tmp_path / "defrag"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, mode, stalls", [
    ("always defer defer+madvise [madvise] never\n", "madvise", True),
    ("always defer [defer+madvise] madvise never\n", "defer+madvise", True),
    ("[always] defer defer+madvise madvise never\n", "always", False),
    ("always [defer] defer+madvise madvise never\n", "defer", False),
    ("always defer defer+madvise madvise [never]\n", "never", False),
    ("garbage\n", None, False),
])
def test_defrag_mode_is_the_bracketed_word(tmp_path, text, mode, stalls):
    p = _defrag(tmp_path, text)
    assert hostmem.defrag_mode(p) == mode
    assert hostmem.hint_stalls(p) is stalls


def test_absent_sysfs_means_no_change(tmp_path, monkeypatch):
    monkeypatch.delenv(hostmem.ENV, raising=False)
    assert hostmem.defrag_mode(tmp_path / "absent") is None
    before = np_ma._get_madvise_hugepage()
    with hostmem.small_pages(tmp_path / "absent") as changed:
        assert changed is False
        assert hostmem.ENV not in os.environ
        assert np_ma._get_madvise_hugepage() == before


def test_stalling_kernel_turns_the_hint_off_and_restores_it(tmp_path, monkeypatch):
    monkeypatch.delenv(hostmem.ENV, raising=False)
    p = _defrag(tmp_path, "always defer defer+madvise [madvise] never\n")
    old = np_ma._set_madvise_hugepage(True)
    try:
        with hostmem.small_pages(p) as changed:
            assert changed is True
            assert os.environ[hostmem.ENV] == "0"  # spawned workers import numpy with the hint off
            assert np_ma._get_madvise_hugepage() is False
        assert hostmem.ENV not in os.environ
        assert np_ma._get_madvise_hugepage() is True
    finally:
        np_ma._set_madvise_hugepage(old)


def test_the_users_setting_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(hostmem.ENV, "1")
    p = _defrag(tmp_path, "always defer defer+madvise [madvise] never\n")
    old = np_ma._set_madvise_hugepage(True)
    try:
        with hostmem.small_pages(p) as changed:
            assert changed is False
            assert np_ma._get_madvise_hugepage() is True
        assert os.environ[hostmem.ENV] == "1"
    finally:
        np_ma._set_madvise_hugepage(old)


def test_an_exception_inside_still_restores(tmp_path, monkeypatch):
    monkeypatch.delenv(hostmem.ENV, raising=False)
    p = _defrag(tmp_path, "always defer [defer+madvise] madvise never\n")
    old = np_ma._set_madvise_hugepage(True)
    try:
        with pytest.raises(RuntimeError):
            with hostmem.small_pages(p):
                raise RuntimeError("boom")
        assert np_ma._get_madvise_hugepage() is True and hostmem.ENV not in os.environ
    finally:
        np_ma._set_madvise_hugepage(old)


def test_cli_command_runs_under_small_pages_and_restores(tmp_path, monkeypatch):
    from click.testing import CliRunner
    from perfgate import cli
    seen = {}
    real = hostmem.small_pages

    def spy(path=hostmem.DEFRAG):
        seen["called"] = True
        return real(_defrag(tmp_path, "always defer defer+madvise [madvise] never\n"))
    monkeypatch.setattr(hostmem, "small_pages", spy)
    monkeypatch.delenv(hostmem.ENV, raising=False)
    old = np_ma._set_madvise_hugepage(True)
    try:
        r = CliRunner().invoke(cli.main, ["baseline", "list", "--baseline-dir", str(tmp_path / "store")])
        assert r.exit_code == 0, r.output
        assert seen.get("called") is True
        assert np_ma._get_madvise_hugepage() is True and hostmem.ENV not in os.environ
    finally:
        np_ma._set_madvise_hugepage(old)


@pytest.mark.parametrize("text, expect_env", [
    ("always defer defer+madvise [madvise] never\n", "0"),     # stalls: off for the command
    ("always [defer] defer+madvise madvise never\n", None),    # does not stall: numpy's default
])
def test_an_empty_setting_is_unset_not_a_crash(tmp_path, monkeypatch, text, expect_env):
    monkeypatch.setenv(hostmem.ENV, "")
    with hostmem.small_pages(_defrag(tmp_path, text)):
        assert os.environ.get(hostmem.ENV) == expect_env
    assert os.environ[hostmem.ENV] == ""                        # restored as given


def test_cli_survives_an_empty_numpy_madvise_hugepage(tmp_path):
    import subprocess
    import sys
    env = dict(os.environ, NUMPY_MADVISE_HUGEPAGE="")
    r = subprocess.run([sys.executable, "-m", "perfgate", "synth", str(tmp_path / "cap")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
