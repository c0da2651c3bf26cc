"""A large timeline scanned in another process while this one reads the kernel table
(``perfgate.ingest.load.load_rank(trace_pool=...)``, ``perfgate.app.run._load_with_trace_ahead``):
the same fingerprint and the same errors as a serial read, no process left behind, and only
when more than one process is allowed."""
import multiprocessing
import os
import sys
from pathlib import Path

import pytest

import perfgate.ingest.load as load
import perfgate.app.run as run
from perfgate.errors import InvalidCaptureError
from perfgate.ingest import traceahead, tracebytes
from perfgate.app.run import fingerprint_path
from perfgate.synth.scale import write_scaled


def _strip(fp):
    return ({k: v.to_dict() for k, v in fp.metrics.items()}, sorted(repr(c.to_dict()) for c in fp.self_checks),
            sorted(repr(f.to_dict()) for f in fp.findings), fp.config, fp.detail, sorted(fp.warnings))


@pytest.fixture(autouse=True)
def as_the_command_line():
    """Scanning ahead is what the command line turns on (library callers ask for it)."""
    with run.timelines_scanned_ahead():
        yield


@pytest.fixture
def spy(monkeypatch):
    """Every threshold at 0 (any timeline is scanned ahead) and the futures submitted, kept."""
    monkeypatch.setattr(load, "TRACE_AHEAD_BYTES", 0)
    futures = []
    orig = load._trace_ahead

    def recording(pool, loc, with_trace):
        fut = orig(pool, loc, with_trace)
        if fut is not None:
            futures.append(fut)
        return fut
    monkeypatch.setattr(load, "_trace_ahead", recording)
    return futures


@pytest.fixture(scope="module")
def cap(tmp_path_factory):
    return write_scaled(tmp_path_factory.mktemp("ahead") / "c", ranks=1, steps=3, kernels_per_step=300, trace_mb=2)


def _no_children():
    return [p for p in multiprocessing.active_children() if p.is_alive()]


def test_scan_ahead_gives_the_serial_fingerprint(cap, policy, spy):
    if run.usable_cpus() < 2:
        pytest.skip("one usable CPU: the timeline is never scanned ahead")
    ahead = fingerprint_path(cap, policy, with_trace="always")          # workers=None: allowed
    assert len(spy) == 1
    assert spy[0].done() and spy[0].exception() is None
    assert isinstance(spy[0].result(), tracebytes.Extract)             # the other process did the scan
    assert spy[0].result().n > 0
    serial = fingerprint_path(cap, policy, with_trace="always", workers=1)
    assert len(spy) == 1                                                # --workers 1: this process only
    assert _strip(ahead) == _strip(serial)
    assert ahead.config["has_trace"]
    assert not _no_children()


def test_workers_one_and_small_traces_stay_in_this_process(cap, policy, monkeypatch):
    started = []
    monkeypatch.setattr(run, "_load_with_trace_ahead", lambda *a: started.append(a) or pytest.fail("spawned"))
    fingerprint_path(cap, policy, with_trace="always", workers=1)
    fingerprint_path(cap, policy, with_trace="always")       # 2 MiB < TRACE_AHEAD_BYTES (64 MiB)
    fingerprint_path(cap, policy, with_trace="never")
    assert not started
    assert load.TRACE_AHEAD_BYTES == 64 << 20


def test_a_broken_timeline_gives_the_serial_error(tmp_path, policy, spy):
    if run.usable_cpus() < 2:
        pytest.skip("one usable CPU: the timeline is never scanned ahead")
    c = write_scaled(tmp_path / "c", ranks=1, steps=2, kernels_per_step=100, trace_mb=1)
    tv = next(Path(c).rglob("trace_view.json"))
    data = tv.read_bytes()
    tv.write_bytes(data[: len(data) // 2])                              # truncated mid-event
    errors = []
    for workers in (None, 1):
        with pytest.raises(InvalidCaptureError) as e:
            fingerprint_path(c, policy, with_trace="always", workers=workers)
        errors.append(str(e.value))
    assert len(spy) == 1 and isinstance(spy[0].exception(), tracebytes.NoFastPath)
    assert errors[0] == errors[1]
    assert "trace_view.json" in errors[0]
    assert not _no_children()


def test_a_refused_kernel_table_is_reported_first_and_stops_the_scan(tmp_path, policy, spy):
    if run.usable_cpus() < 2:
        pytest.skip("one usable CPU: the timeline is never scanned ahead")
    c = write_scaled(tmp_path / "c", ranks=1, steps=2, kernels_per_step=100, trace_mb=1)
    kd = next(Path(c).rglob("kernel_details.csv"))
    kd.write_text(kd.read_text().splitlines()[0] + "\n")               # header only
    msgs = []
    for workers in (None, 1):
        with pytest.raises(InvalidCaptureError) as e:
            fingerprint_path(c, policy, with_trace="always", workers=workers)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] and "kernel_details.csv" in msgs[0] and "no data rows" in msgs[0]
    assert len(spy) == 1
    assert not _no_children()


def _die(path):
    """Stands for a scanning process killed mid-way (out of memory, SIGKILL)."""
    os._exit(9)


def test_a_killed_scanning_process_is_replaced_by_a_scan_here(cap, policy, monkeypatch):
    if run.usable_cpus() < 2:
        pytest.skip("one usable CPU: the timeline is never scanned ahead")
    monkeypatch.setattr(load, "TRACE_AHEAD_BYTES", 0)
    submitted = []

    def dying(pool, loc, with_trace):
        if pool is None:
            return None
        fut = pool.submit(_die, load._timeline_path(loc)[0])
        submitted.append(fut)
        return fut
    monkeypatch.setattr(load, "_trace_ahead", dying)
    sys.path.insert(0, str(Path(__file__).parent))   # the spawned process imports this module
    try:
        ahead = fingerprint_path(cap, policy, with_trace="always")
    finally:
        sys.path.remove(str(Path(__file__).parent))
    assert submitted and type(submitted[0].exception()).__name__ == "BrokenProcessPool"
    serial = fingerprint_path(cap, policy, with_trace="always", workers=1)
    assert _strip(ahead) == _strip(serial)
    assert not _no_children()


def test_the_scanning_process_needs_no_pandas():
    """The process that scans ahead imports perfgate.ingest.traceahead alone: not pandas or
    pyarrow (that is what makes it start in ~0.3 s instead of ~0.9 s)."""
    import subprocess
    code = ("import sys, perfgate.ingest.traceahead; "
            "print(sorted(m for m in ('pandas', 'pyarrow', 'scipy', 'ijson') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_library_callers_scan_in_this_process_unless_they_ask(cap, policy, spy):
    """Outside :func:`perfgate.app.run.timelines_scanned_ahead` nothing is spawned: a spawned
    process imports the caller's main module again (multiprocessing's "spawn" rule)."""
    with run.timelines_scanned_ahead(False):
        fingerprint_path(cap, policy, with_trace="always")
    assert spy == []


def test_the_command_line_scans_ahead(cap, tmp_path, monkeypatch):
    """``perfgate fingerprint`` runs with scanning ahead on: the command line in a subprocess,
    through a wrapper script that sets the threshold to 0 and records whether a scan was
    submitted."""
    import subprocess
    code = ("import sys, perfgate.ingest.load as L, perfgate.app.run as R\n"
            "L.TRACE_AHEAD_BYTES = 0\n"
            "seen = []\n"
            "orig = L._trace_ahead\n"
            "def rec(*a):\n"
            "    f = orig(*a)\n"
            "    seen.append(f is not None)\n"
            "    return f\n"
            "L._trace_ahead = rec\n"
            "from perfgate.cli import main\n"
            "if __name__ == '__main__':\n"
            "    try:\n"
            "        main(sys.argv[1:])\n"
            "    finally:\n"
            "        print('SCANNED-AHEAD', seen, R.usable_cpus() >= 2, file=sys.stderr)\n")
    script = tmp_path / "wrap.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script), "fingerprint", str(cap), "-o", str(tmp_path / "fp.json"),
                        "--trace", "always"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-800:]
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("SCANNED-AHEAD"))
    assert line == ("SCANNED-AHEAD [True] True" if run.usable_cpus() >= 2 else "SCANNED-AHEAD [False] False")


@pytest.mark.parametrize("capture", ["text/level1", "text/level2", "st/level2"])
def test_the_timeline_free_part_gives_the_same_summary(capture, ascend, policy):
    """summarize_rank with timeline_free_part made beforehand == summarize_rank alone, on real
    captures (categories, structure metrics and class tables are taken, not recomputed)."""
    from perfgate.ingest import discover, load_rank
    from perfgate.metrics.fingerprint import summarize_rank, timeline_free_part
    root = ascend / "msinsight" / "test" / ("data/pytorch/" + capture if capture.startswith("text") else capture)
    for loc in discover(root):
        rank = load_rank(loc, with_trace="read")
        if rank.kernels is None:
            continue
        free = timeline_free_part(rank.kernels, rank.rank, policy, root)
        assert "error" not in free and {"cat", "segments", "view"} <= set(free)
        a, b = summarize_rank(rank, policy, root), summarize_rank(rank, policy, root, free)
        for field in ("metrics", "segments", "operators", "steps", "warnings", "findings", "checks", "kinds",
                      "anatomy", "step_time"):
            assert repr(a[field]) == repr(b[field]), field


def test_an_error_of_the_timeline_free_part_is_raised_where_the_summary_meets_it(cap, policy, monkeypatch):
    from perfgate.ingest import discover, load_rank
    import perfgate.metrics.fingerprint as F
    rank = load_rank(discover(cap)[0], with_trace="read")
    boom = InvalidCaptureError("segment rule failed", path=rank.kernels.path)
    real = F._segment_summary_of
    monkeypatch.setattr(F, "_segment_summary_of", lambda *a, **k: (_ for _ in ()).throw(boom))
    free = F.timeline_free_part(rank.kernels, rank.rank, policy, cap)   # never raises: kept
    assert free["error"] is boom and free["stage"] == "segments" and "cat" in free and "view" not in free
    monkeypatch.setattr(F, "_segment_summary_of", real)
    with pytest.raises(InvalidCaptureError) as e:
        F.summarize_rank(rank, policy, cap, free)
    assert e.value is boom
    # made from another kernel table (not this rank's): ignored, computed afresh
    other = load_rank(discover(cap)[0], with_trace="read")
    assert repr(F.summarize_rank(rank, policy, cap, F.timeline_free_part(other.kernels, 0, policy, cap)).metrics) \
        == repr(F.summarize_rank(rank, policy, cap).metrics)


def _slow_scan(path):
    """The timeline scan, made slow enough that the parent's wait is filled."""
    import time
    time.sleep(1.0)
    return traceahead.scan_file(path)


def test_the_wait_for_the_scan_is_filled_with_the_timeline_free_part(cap, policy, monkeypatch):
    if run.usable_cpus() < 2:
        pytest.skip("one usable CPU: the timeline is never scanned ahead")
    import perfgate.metrics.fingerprint as F
    monkeypatch.setattr(load, "TRACE_AHEAD_BYTES", 0)
    monkeypatch.setattr(load, "_trace_ahead", lambda pool, loc, wt: pool and pool.submit(
        _slow_scan, load._timeline_path(loc)[0]))
    made = []
    real = F.timeline_free_part
    monkeypatch.setattr(F, "timeline_free_part", lambda *a: made.append(real(*a)) or made[-1])
    sys.path.insert(0, str(Path(__file__).parent))   # the spawned process imports this module
    try:
        ahead = fingerprint_path(cap, policy, with_trace="always")
    finally:
        sys.path.remove(str(Path(__file__).parent))
    assert len(made) == 1 and "segments" in made[0]
    serial = fingerprint_path(cap, policy, with_trace="always", workers=1)
    assert len(made) == 1
    assert _strip(ahead) == _strip(serial)


def test_compact_then_expand_is_the_scan_itself(cap):
    """What crosses between the processes: narrower integers, the same values and dtypes after."""
    import numpy as np
    tv = next(Path(cap).rglob("trace_view.json"))
    data = tv.read_bytes()
    start = len(data) - len(data.lstrip(b"\xef\xbb\xbf \t\r\n"))
    direct = tracebytes.scan(tv, start, len(data))
    small = traceahead.scan_file(tv)
    assert small.kind.dtype == np.int8 and small.idx.dtype.itemsize < 8
    back = traceahead.expand(small)
    for k in ("idx", "pid", "kind", "ts_ns", "dur_ns"):
        assert getattr(back, k).dtype == np.int64
        assert np.array_equal(getattr(back, k), getattr(direct, k))
    assert back.n == direct.n and back.parsed == direct.parsed and back.flows == direct.flows
    big = np.array([-2**40, 5, 2**40], dtype=np.int64)              # values beyond int32 stay int64
    assert traceahead._narrowest(big).dtype == np.int64
    assert traceahead._narrowest(np.array([-129, 127])).dtype == np.int16


def _big_result_sent_slowly(n):
    """A worker whose result (``n`` bytes) stalls after its first MiB has been written to the
    result pipe, as the scanning process does when it is stopped mid-send."""
    import time
    from multiprocessing.connection import Connection
    send = Connection._send

    def slow(self, buf, write=None):
        if len(buf) > (1 << 20):
            send(self, buf[: 1 << 20])
            time.sleep(60)
        return send(self, buf)
    Connection._send = slow
    return b"x" * n


def test_a_pool_stopped_while_a_result_is_being_sent_lets_the_process_exit(tmp_path):
    """stop_pool on a worker killed in the middle of sending its result: the process exits
    at once (the pool's manager thread was left reading the rest of the message from a pipe
    whose other write end the parent held, and the interpreter waited for it forever)."""
    import subprocess
    import time
    script = tmp_path / "stop_mid_send.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from perfgate.app.run import local_pool, stop_pool\n"
        "from test_trace_ahead import _big_result_sent_slowly\n"
        "if __name__ == '__main__':\n"
        "    with local_pool(1) as pool:\n"
        "        fut = pool.submit(_big_result_sent_slowly, 8 << 20)\n"
        "        time.sleep(3)\n"
        "        stop_pool(pool)\n"
        "    print('stopped', flush=True)\n")
    t = time.perf_counter()
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=40)
    assert r.returncode == 0, r.stderr[-1500:]
    assert r.stdout.strip() == "stopped"
    assert time.perf_counter() - t < 25      # the worker would sleep 60 s: it was not waited for
