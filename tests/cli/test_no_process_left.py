"""The perfgate command ends every process it started before it returns: the local pool's
workers, the process that scans a large timeline beside the tables, and multiprocessing's
resource tracker (which the ``spawn`` pools start and which, left alone, outlived the command by
the time it took to notice its parent was gone). Checked on the real command, run in a process
group of its own: once it has returned, no process of that group may remain, with no grace
period. Success, an error exit (3: a refused rank), Ctrl-C (SIGINT to the whole group, as a
terminal sends it) and SIGTERM mid-run, with the default workers and with ``--workers 2``."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.app import run as run_mod
from perfgate.ingest import TRACE_AHEAD_BYTES, discover
from perfgate.synth.scale import write_scaled

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(),
                                reason="needs Linux /proc to find the processes of a process group")

REPO = Path(__file__).resolve().parents[2]


def _group_members(pgid: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of every live (not zombie) process whose process group is ``pgid``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append((int(d.name), cmd))
    return out


def _is_helper(cmd: str) -> bool:
    return "spawn_main" in cmd or "resource_tracker" in cmd


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """``one``: a rank whose timeline (>= TRACE_AHEAD_BYTES) is scanned in a spawned process with
    the default workers; ``four``: 4 ranks whose tables + traces exceed AUTO_PARALLEL_BYTES, so
    ``--workers 2`` starts the pool; ``refused``: ``four`` with one rank's kernel table broken
    (exit 3 after the pool ran); baselines ``one`` and ``four`` saved in ``bl``."""
    root = tmp_path_factory.mktemp("procs")
    one = write_scaled(root / "one", ranks=1, steps=10, kernels_per_step=500, trace_mb=70)
    four = write_scaled(root / "four", ranks=4, steps=10, kernels_per_step=500, trace_mb=17)
    assert (next(one.rglob("trace_view.json")).stat().st_size >= TRACE_AHEAD_BYTES
            and run_mod._kernel_bytes(discover(four)) > run_mod.AUTO_PARALLEL_BYTES)
    refused = root / "refused"
    shutil.copytree(four, refused)
    table = sorted(refused.rglob("kernel_details.csv"))[-1]
    table.write_text("not,a,kernel,table\n1,2,3,4\n")
    for name, cap in (("one", one), ("four", four)):
        r = subprocess.run([sys.executable, "-m", "perfgate", "baseline", "save", "--name", name, str(cap),
                            "--baseline-dir", str(root / "bl"), "--trace", "never"],
                           capture_output=True, text=True, timeout=300, env=_env())
        assert r.returncode == 0, r.stderr
    return {"one": one, "four": four, "refused": refused, "bl": root / "bl", "root": root}


def _env():
    return dict(os.environ, PYTHONPATH=str(REPO))


def _check(captures, cap: str, baseline: str, tmp_path, workers) -> list[str]:
    if workers is None and run_mod.usable_cpus() < 2:
        pytest.skip("the timeline is scanned in a second process only with two usable CPUs")
    args = [sys.executable, "-m", "perfgate", "check", "--baseline", baseline, str(captures[cap]),
            "--baseline-dir", str(captures["bl"]), "--out", str(tmp_path / "o"), "--trace", "always", "--quiet"]
    return args + (["--workers", str(workers)] if workers else [])


def _run_in_own_group(args, interrupt=None, timeout: float = 300):
    """Run ``args`` as the leader of a new session (so its process group is its pid); with
    ``interrupt`` (a signal), send it to the whole group once a spawned helper (pool worker or timeline scan)
    is running. Returns ``(returncode, stderr, helpers seen, group members left after it
    returned)``; anything left is killed before returning, so no test leaves a process behind."""
    p = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, env=_env())
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + timeout
        while p.poll() is None and time.monotonic() < deadline:
            seen |= {cmd for _, cmd in _group_members(p.pid) if _is_helper(cmd)}
            if interrupt and any("spawn_main" in c for c in seen):
                time.sleep(0.3)   # the helper importing / working
                os.killpg(p.pid, interrupt)
                break
            time.sleep(0.02)
        _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        left = _group_members(p.pid)   # at once: no grace beyond the command's return
    finally:
        for pid, _ in _group_members(p.pid):
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, err, seen, left


@pytest.mark.parametrize("cap, baseline, workers", [("one", "one", None), ("four", "four", 2)],
                         ids=["timeline-scan", "workers-2"])
def test_a_passing_check_leaves_no_process_in_its_group(captures, tmp_path, cap, baseline, workers):
    code, err, seen, left = _run_in_own_group(_check(captures, cap, baseline, tmp_path, workers))
    assert code == 0, err
    assert any("spawn_main" in c for c in seen), f"no helper process ever started: {seen}"
    assert left == [], f"processes left in the command's process group: {left}"


def test_a_refused_rank_leaves_no_process_in_its_group(captures, tmp_path):
    code, err, seen, left = _run_in_own_group(_check(captures, "refused", "four", tmp_path, 2))
    assert code == 3, err
    assert any("spawn_main" in c for c in seen), f"the pool never started: {seen}"
    assert left == [], f"processes left in the command's process group: {left}"


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("cap, baseline, workers", [("one", "one", None), ("four", "four", 2)],
                         ids=["timeline-scan", "workers-2"])
def test_a_signal_mid_run_leaves_no_process_in_its_group(captures, tmp_path, cap, baseline, workers, sig, code):
    """Ctrl-C (SIGINT to the group, as a terminal sends it) and a cancelled CI job (SIGTERM)."""
    got, err, seen, left = _run_in_own_group(_check(captures, cap, baseline, tmp_path, workers), interrupt=sig)
    assert any("spawn_main" in c for c in seen), f"no helper process ever started: {seen}"
    assert got in (code, 0), err   # 0: the command had finished when the signal came
    assert left == [], f"processes left in the command's process group: {left}"
