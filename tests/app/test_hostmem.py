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


def test_arrow_pool_is_jemalloc_inside_and_restored_after(monkeypatch):
    import pyarrow as pa
    from perfgate.hostmem import ARROW_ENV, arrow_jemalloc
    monkeypatch.delenv(ARROW_ENV, raising=False)
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        with arrow_jemalloc() as switched:
            assert switched is False and ARROW_ENV not in os.environ
        return
    before = pa.default_memory_pool().backend_name
    with arrow_jemalloc() as switched:
        assert switched is True
        assert pa.default_memory_pool().backend_name == "jemalloc"
        assert os.environ[ARROW_ENV] == "jemalloc"          # spawned workers inherit it
        import pyarrow.csv as pacsv
        import io
        used = pa.jemalloc_memory_pool().bytes_allocated()
        t = pacsv.read_csv(io.BytesIO(b"a,b\n" + b"1,x\n" * 1000))
        assert pa.jemalloc_memory_pool().bytes_allocated() > used   # the CSV reader's buffers come from it
        del t
    assert pa.default_memory_pool().backend_name == before
    assert ARROW_ENV not in os.environ


def test_arrow_pool_the_user_chose_is_kept(monkeypatch):
    import pyarrow as pa
    from perfgate.hostmem import ARROW_ENV, arrow_jemalloc
    monkeypatch.setenv(ARROW_ENV, "system")
    before = pa.default_memory_pool().backend_name
    with arrow_jemalloc() as switched:
        assert switched is False
        assert os.environ[ARROW_ENV] == "system"
        assert pa.default_memory_pool().backend_name == before


def test_the_command_line_runs_on_jemalloc_where_pyarrow_has_it(tmp_path):
    """A perfgate command's process (and what it spawns) allocates Arrow buffers from jemalloc."""
    import subprocess
    import sys
    code = ("import sys, click, pyarrow as pa\n"
            "from perfgate.cli import main\n"
            "@main.command('pool-probe')\n"
            "def probe():\n"
            "    import os\n"
            "    click.echo(pa.default_memory_pool().backend_name + ' ' + os.environ.get('ARROW_DEFAULT_MEMORY_POOL', '-'))\n"
            "main(['pool-probe'])\n")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.strip()
    try:
        import pyarrow as pa
        pa.jemalloc_memory_pool()
        assert out == "jemalloc jemalloc"
    except NotImplementedError:
        assert out.endswith(" -")
