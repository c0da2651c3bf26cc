"""Ctrl-C exits 130 with one line (not click's "Aborted!" and exit 1, the regression code); SIGTERM
(a cancelled CI job) exits 143 and stops the local process pool's workers: no orphan survives."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfgate.app import run as run_mod
from perfgate.cli import main
from perfgate.ingest import discover
from perfgate.synth import SynthSpec, write_capture
from perfgate.synth.scale import write_scaled


def test_keyboard_interrupt_exits_130_without_traceback(tmp_path, monkeypatch):
    cap = write_capture(tmp_path / "c", SynthSpec(seed=1))

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("perfgate.app.gate.check_and_report", interrupted)
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cap), "--baseline-dir", str(tmp_path / "bl"),
                                  "--out", str(tmp_path / "o")])
    assert r.exit_code == 130, r.output
    assert "interrupted" in r.output and "Aborted!" not in r.output and "Traceback" not in r.output
    monkeypatch.setattr("perfgate.app.gate.save_baseline", interrupted)
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "m", str(cap), "--baseline-dir", str(tmp_path / "bl")])
    assert r.exit_code == 130 and "interrupted" in r.output, r.output


@pytest.mark.parametrize("level", ["top", "sub"])
def test_keyboard_interrupt_during_option_parsing_exits_130(tmp_path, monkeypatch, level):
    """Ctrl-C while click parses the options (the top-level group's own parsing runs in click's
    standalone main, outside _Group.invoke) is exit 130 with perfgate's line, not "Aborted!" / exit 1."""
    import click
    parse = click.Command.parse_args

    def interrupted(self, ctx, args):
        if (ctx.parent is None) == (level == "top"):
            raise KeyboardInterrupt
        return parse(self, ctx, args)

    monkeypatch.setattr(click.Command, "parse_args", interrupted)
    r = CliRunner().invoke(main, ["baseline", "list", "--baseline-dir", str(tmp_path)])
    assert r.exit_code == 130, r.output
    assert r.output == "\nperfgate: interrupted (Ctrl-C); nothing judged (exit 130)\n"


def test_keyboard_interrupt_during_option_parsing_in_a_real_process(tmp_path):
    code = ("import click, sys\n"
            "def parse(self, ctx, args):\n    raise KeyboardInterrupt\n"
            "click.Command.parse_args = parse\n"
            "from perfgate.cli import main\n"
            "main(['--version'], prog_name='perfgate')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert p.returncode == 130, (p.returncode, p.stderr)
    assert p.stderr.strip() == "perfgate: interrupted (Ctrl-C); nothing judged (exit 130)" and "Aborted!" not in p.stderr


def test_sigterm_handler_is_restored_after_an_in_process_run(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    CliRunner().invoke(main, ["baseline", "list", "--baseline-dir", str(tmp_path)])
    assert signal.getsignal(signal.SIGTERM) is before


def _children(pid: int) -> set[int]:
    """Every descendant process id of ``pid`` (Linux /proc)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def big_capture(tmp_path_factory):
    """4 ranks whose kernel tables + traces (4 x ~17 MiB) exceed AUTO_PARALLEL_BYTES, so
    ``--workers 2`` really starts the spawned pool."""
    d = write_scaled(tmp_path_factory.mktemp("big") / "cap", ranks=4, steps=10, kernels_per_step=500, trace_mb=17)
    assert run_mod._kernel_bytes(discover(d)) > run_mod.AUTO_PARALLEL_BYTES
    return d


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc to find child processes")
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_multi_worker_check_stops_every_worker(tmp_path, big_capture, sig, code):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.Popen([sys.executable, "-m", "perfgate", "check", "--baseline", "x", str(big_capture),
                          "--baseline-dir", str(tmp_path / "bl"), "--out", str(tmp_path / "o"), "--workers", "2",
                          "--trace", "always", "--quiet"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        seen |= _children(p.pid)
        if len(seen) >= 2:  # the pool's workers are up (plus, with spawn, the resource tracker)
            break
        time.sleep(0.05)
    assert p.poll() is None and len(seen) >= 2, f"pool never started: {seen}"
    time.sleep(0.5)  # workers importing / reading their ranks
    seen |= _children(p.pid)
    p.send_signal(sig)
    try:  # an orphaned worker keeps stderr open: communicate() would wait for it
        out, err = p.communicate(timeout=60)
        time.sleep(1.0)
        survivors = [c for c in seen if _alive(c)]
    finally:
        for c in seen:  # never leave a process behind, even when the test fails
            if _alive(c):
                os.kill(c, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
    assert p.returncode == code, (out, err)
    assert "Traceback" not in err and "Aborted!" not in err, err
    assert ("terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted") in err
    assert survivors == [], f"orphaned worker processes: {survivors}"
    assert not (tmp_path / "o" / "perfgate-result.json").exists()  # nothing judged, nothing reported


def test_an_interrupted_baseline_save_says_no_baseline_was_saved(tmp_path, monkeypatch):
    """Ctrl-C during ``baseline save`` said "nothing judged": it names what it
    leaves, the stored baseline as it was."""
    cap = write_capture(tmp_path / "c", SynthSpec(seed=1))
    bl = tmp_path / "bl"
    assert CliRunner().invoke(main, ["baseline", "save", "--name", "m", str(cap), "--baseline-dir", str(bl)]).exit_code == 0
    before = (bl / "m.json").read_bytes()

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("perfgate.app.gate.save_baseline", interrupted)
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "m", str(cap), "--baseline-dir", str(bl)])
    assert r.exit_code == 130, r.output
    assert "interrupted (Ctrl-C); no baseline saved: 'm' in the store is as it was (exit 130)" in r.output
    assert "nothing judged" not in r.output
    assert (bl / "m.json").read_bytes() == before
    monkeypatch.setattr("perfgate.app.gate.record_history", interrupted)
    r = CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--db", str(tmp_path / "h.sqlite")])
    assert r.exit_code == 130 and "nothing recorded: the history database is as it was" in r.output, r.output


@pytest.mark.parametrize("command, code", [("save", 0), ("check", 4)])
def test_a_ctrl_c_after_the_command_finished_changes_nothing(tmp_path, command, code):
    """A Ctrl-C after "saved baseline ..." was printed (the interpreter shutting down) was a
    KeyboardInterrupt traceback, or a death by the signal. The command had
    finished: its exit code stands, 0 for a save and the verdict's own for a check that exits
    non-zero (4: no baseline). The console script's way in (``main()``, arguments from argv);
    the Ctrl-C arrives from an exit handler, after the command returned."""
    cap = write_capture(tmp_path / "c", SynthSpec(seed=1))
    args = (["baseline", "save", "--name", "m", str(cap), "--baseline-dir", str(tmp_path / "bl")]
            if command == "save" else
            ["check", "--baseline", "m", str(cap), "--baseline-dir", str(tmp_path / "bl"), "--out", str(tmp_path / "o")])
    code_text = ("import atexit, os, signal, sys, time\n"
                 "def late():\n"
                 "    os.kill(os.getpid(), signal.SIGINT)\n"
                 "    time.sleep(0.05)\n"
                 "atexit.register(late)\n"
                 "from perfgate.cli import main\n"
                 f"sys.argv = ['perfgate'] + {args!r}\n"
                 "main()\n")
    p = subprocess.run([sys.executable, "-c", code_text], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Aborted!" not in p.stderr and "Traceback" not in p.stderr and "KeyboardInterrupt" not in p.stderr, p.stderr
    if command == "save":
        assert "saved baseline 'm'" in p.stdout and (tmp_path / "bl" / "m.json").is_file()
    else:
        assert "NO_BASELINE" in p.stdout + p.stderr


def test_the_sigint_handler_is_restored_after_an_in_process_run(tmp_path):
    before = signal.getsignal(signal.SIGINT)
    CliRunner().invoke(main, ["baseline", "list", "--baseline-dir", str(tmp_path)])
    assert signal.getsignal(signal.SIGINT) is before


def test_a_ctrl_c_after_check_wrote_its_reports_keeps_their_verdict(tmp_path, monkeypatch):
    """A Ctrl-C after the reports were written (while the verdict is printed or the comment
    posted) exited 130 while perfgate-result.json said exit 0: the reports'
    exit code stands, and the line says so."""
    cap = write_capture(tmp_path / "c", SynthSpec(seed=1))
    bl = tmp_path / "bl"
    assert CliRunner().invoke(main, ["baseline", "save", "--name", "m", str(cap), "--baseline-dir", str(bl)]).exit_code == 0

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("perfgate.cli._print_summary", interrupted)
    r = CliRunner().invoke(main, ["check", "--baseline", "m", str(cap), "--baseline-dir", str(bl), "--out",
                                  str(tmp_path / "o")])
    import json
    written = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())["exit_code"]
    assert r.exit_code == written == 0, r.output
    assert "after the reports were written; their verdict stands (exit 0)" in r.output
    monkeypatch.undo()
    r = CliRunner().invoke(main, ["baseline", "list", "--baseline-dir", str(bl)])   # no outcome carried over
    assert r.exit_code == 0, r.output


def test_an_interrupt_while_history_record_starts_says_nothing_recorded(tmp_path, monkeypatch):
    """Ctrl-C during history record's imports said "nothing judged"."""
    import builtins
    real = builtins.__import__

    def slow(name, *a, **k):
        if name == "perfgate.app.gate":
            raise KeyboardInterrupt
        return real(name, *a, **k)

    cap = write_capture(tmp_path / "c", SynthSpec(seed=1))
    monkeypatch.setattr(builtins, "__import__", slow)
    r = CliRunner().invoke(main, ["history", "record", str(cap), "--branch", "main", "--db", str(tmp_path / "h.sqlite")])
    monkeypatch.undo()
    assert r.exit_code == 130 and "nothing recorded: the history database is as it was" in r.output, r.output
