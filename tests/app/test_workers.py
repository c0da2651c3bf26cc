"""Rank workers: a dask scheduler without workers is refused in bounded time, and the local pool's
workers exit when their parent is killed."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest


@pytest.mark.slow
def test_a_scheduler_without_workers_is_refused_in_bounded_time(synth_cap):
    """``--scheduler`` pointing at a dask scheduler with no worker hung forever (a CI gate until
    the job's timeout). Now exit 2 after the connection timeout (10 s). The scheduler runs in a
    process of its own, as in CI: one in this test process would change its garbage collector
    settings for the tests after it."""
    pytest.importorskip("distributed")
    import socket
    import subprocess
    import sys
    import time
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                              "--port", str(port), "--no-dashboard"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:   # until the scheduler listens
            with socket.socket() as sk:
                if sk.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "perfgate", "fingerprint", str(synth_cap), "--scheduler",
                            f"tcp://127.0.0.1:{port}"], capture_output=True, text=True, timeout=90)
        assert r.returncode == 2, r.stderr
        assert "has no worker" in r.stderr and time.perf_counter() - t < 60
    finally:
        sched.terminate()
        sched.wait(15)


# 5. pool workers never outlive a SIGKILLed parent
_POOL_CHILD = r"""
import os, sys, time
from perfgate.app.run import local_pool
with local_pool(2) as pool:
    futs = [pool.submit(time.sleep, 0.5) for _ in range(4)]
    for f in futs:
        f.result()
    print(" ".join(str(p) for p in pool._processes), flush=True)
    time.sleep(120)
"""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (killed, not yet reaped by init) is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


@pytest.mark.parametrize("main_thread", [True, False])
def test_pool_workers_exit_when_parent_is_killed(tmp_path, main_thread):
    import signal
    code = _POOL_CHILD if main_thread else (
        "import threading\n" + "def body():\n" + "".join("    " + ln + "\n" for ln in _POOL_CHILD.strip().splitlines())
        + "t = threading.Thread(target=body); t.start(); t.join()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        line = child.stdout.readline()
        pids = [int(x) for x in line.split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids), [p for p in pids if _alive(p)]
    finally:
        if child.poll() is None:
            child.kill()
        for p in pids:   # never leave a worker of a failed run behind
            if _alive(p):
                os.kill(p, signal.SIGKILL)
