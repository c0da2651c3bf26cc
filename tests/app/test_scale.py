"""Large captures: scaled synthetic captures, ranks in a process pool or on a dask cluster (same
fingerprint as in-process), a 64-rank capture under a 4 GB memory limit, huge-trace skipping."""
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.app.run import fingerprint_path
from perfgate.synth.scale import write_scaled


def same(a, b):
    strip = lambda fp: ({k: v.to_dict() for k, v in fp.metrics.items()},
                        sorted(repr(c.to_dict()) for c in fp.self_checks),
                        sorted(repr(f.to_dict()) for f in fp.findings), fp.config, fp.detail)
    return strip(a) == strip(b)


@pytest.fixture(scope="module")
def cap(tmp_path_factory):
    return write_scaled(tmp_path_factory.mktemp("scale") / "c", ranks=4, steps=3, kernels_per_step=400)


def test_scaled_capture_is_self_consistent(cap, policy):
    fp = fingerprint_path(cap, policy, workers=1)
    assert {c.status for c in fp.self_checks} == {"pass"}
    assert fp.metrics["kernel.total_calls_per_step{view=p50}"].value == 402


def test_two_runs_of_one_model_gate_unchanged(tmp_path, policy):
    from perfgate.compare import compare_fingerprints
    a = fingerprint_path(write_scaled(tmp_path / "a", ranks=2, steps=3, kernels_per_step=300, run=1), policy)
    b = fingerprint_path(write_scaled(tmp_path / "b", ranks=2, steps=3, kernels_per_step=300, run=2), policy)
    assert not [c.key for c in compare_fingerprints(a, b, policy)[0] if c.fails]


def test_process_pool_matches_serial(cap, policy, monkeypatch):
    import perfgate.app.run as run
    monkeypatch.setattr(run, "AUTO_PARALLEL_BYTES", 0)  # this small capture through the pool anyway
    assert same(fingerprint_path(cap, policy, workers=1), fingerprint_path(cap, policy, workers=2))


def test_small_capture_with_workers_runs_in_this_process(tmp_path, policy, monkeypatch):
    """--workers 2 on a small capture starts no pool: spawned workers would each import perfgate
    (more CPU than the work), for no gain on wall time."""
    import concurrent.futures

    import perfgate.app.run as run
    c = write_scaled(tmp_path / "c", ranks=3, steps=2, kernels_per_step=50)
    assert run._kernel_bytes(run_locs(c)) <= run.AUTO_PARALLEL_BYTES

    def refuse(*a, **k):
        raise AssertionError("a process pool was started for a small capture")
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    fp = fingerprint_path(c, policy, workers=2)
    assert fp.config["ranks"] == [0, 1, 2]


@pytest.mark.parametrize("allowed, expect", [({0}, None), ({0, 1, 2}, 3)])
def test_default_pool_size_is_the_cpus_this_process_may_run_on(cap, policy, monkeypatch, allowed, expect):
    """Without --workers the pool has one process per CPU of this process's affinity mask
    (taskset, a cpuset), not per CPU of the machine: pinned to one CPU, no pool starts."""
    import contextlib

    import perfgate.app.run as run
    monkeypatch.setattr(run, "AUTO_PARALLEL_BYTES", 0)
    monkeypatch.setattr(run.os, "sched_getaffinity", lambda pid: set(allowed), raising=False)
    started = []
    real = run.local_pool

    @contextlib.contextmanager
    def spy(n):
        started.append(n)
        with real(n) as pool:
            yield pool
    monkeypatch.setattr(run, "local_pool", spy)
    fp = fingerprint_path(cap, policy)
    assert started == ([] if expect is None else [expect])
    assert same(fp, fingerprint_path(cap, policy, workers=1))


def run_locs(c):
    from perfgate.ingest import discover
    return discover(c)


@pytest.mark.slow
@pytest.mark.parametrize("tasks_per_thread", [8, 1])
def test_dask_local_cluster_matches_serial(cap, policy, monkeypatch, tasks_per_thread):
    """The dask path gives the same fingerprint as the local path, with a task per rank (4 ranks,
    2 threads x 8 tasks each) and with the ranks grouped two to a task (1 task per thread)."""
    distributed = pytest.importorskip("distributed")
    import perfgate.app.run as run_module
    monkeypatch.setattr(run_module, "TASKS_PER_THREAD", tasks_per_thread)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
        seen = []
        fp = fingerprint_path(cap, policy, scheduler=cl.scheduler_address, progress=lambda d, t: seen.append((d, t)))
    assert same(fp, fingerprint_path(cap, policy, workers=1))
    assert seen[-1] == (4, 4)


@pytest.mark.slow
def test_unreachable_scheduler_is_a_usage_error(cap, policy):
    pytest.importorskip("distributed")
    from perfgate.errors import UsageError
    with pytest.raises(UsageError, match="cannot reach a dask scheduler at tcp://127.0.0.1:9"):
        fingerprint_path(cap, policy, scheduler="tcp://127.0.0.1:9")


def _serve(reply: bytes | None):
    """A TCP listener on a free port that answers every connection with ``reply`` (None: accepts
    and never answers), like a dashboard or proxy port given by mistake."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []

    def loop():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            held.append(c)
            if reply is not None:
                try:
                    c.sendall(reply)
                except OSError:
                    pass
    threading.Thread(target=loop, daemon=True).start()
    return srv, f"tcp://127.0.0.1:{srv.getsockname()[1]}"


@pytest.mark.slow
def test_a_port_that_is_not_a_dask_scheduler_is_a_usage_error_never_a_crash_or_a_hang(cap, policy):
    pytest.importorskip("distributed")
    from perfgate.errors import UsageError
    srv, addr = _serve(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n" * 4)
    try:  # the reply is read as a frame length: dask fails with MemoryError; perfgate says what it is
        with pytest.raises(UsageError, match=f"cannot reach a dask scheduler at {addr}"):
            fingerprint_path(cap, policy, scheduler=addr)
    finally:
        srv.close()
    srv, addr = _serve(None)
    # accepts, never answers: the hard deadline ends it. In a child process, as in the CLI (whose
    # process then exits): the abandoned connection keeps dask's event loop of its process busy,
    # so a later dask client in the same process (another test) could not start
    child = ("import sys, time\n"
             "from distributed import Client\n"
             "from perfgate.app.run import _connect_scheduler\n"
             "from perfgate.errors import UsageError\n"
             "t = time.monotonic()\n"
             "try:\n"
             "    _connect_scheduler(Client, sys.argv[1], timeout_s=1.0)\n"
             "except UsageError as e:\n"
             "    print(f'{time.monotonic() - t:.1f} {e}')\n")
    try:
        r = subprocess.run([sys.executable, "-c", child, addr], capture_output=True, text=True, timeout=60)
    finally:
        srv.close()
    took, said = r.stdout.split(" ", 1)
    assert "did not answer within 6 s" in said and float(took) < 15, r.stdout + r.stderr[-800:]


@pytest.mark.slow
def test_64_ranks_end_to_end_under_4gb(tmp_path):
    """Must show 2: a 64-rank capture saved and checked through the CLI with RLIMIT_AS = 4 GiB."""
    base = write_scaled(tmp_path / "base", ranks=64, steps=2, kernels_per_step=300, run=1)
    cand = write_scaled(tmp_path / "cand", ranks=64, steps=2, kernels_per_step=300, run=2)
    limit = 4 << 30

    def run(*args):
        return subprocess.run([sys.executable, "-m", "perfgate.cli", *map(str, args)], capture_output=True,
                              text=True, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    r = run("baseline", "save", "--name", "main", base, "--baseline-dir", tmp_path / "bl", "--workers", "1")
    assert r.returncode == 0, r.stderr[-800:]
    r = run("check", "--baseline", "main", cand, "--baseline-dir", tmp_path / "bl", "--out", tmp_path / "o",
            "--workers", "1", "--quiet")
    assert r.returncode == 0, r.stdout[-800:] + r.stderr[-800:]
    assert "PASS" in r.stdout


def test_huge_trace_is_skipped_when_step_trace_suffices(tmp_path, policy, monkeypatch):
    import perfgate.ingest.load as ingest
    c = write_scaled(tmp_path / "c", ranks=1, steps=2, kernels_per_step=100, trace_mb=1)
    monkeypatch.setattr(ingest, "AUTO_TRACE_BYTES", 1000)
    fp = fingerprint_path(c, policy, with_trace="auto")
    assert any("trace_view.json" in w and "not read" in w for w in fp.warnings)
    assert "comm_equality" in {c.name for c in fp.self_checks if c.status == "pass"}  # from step_trace_time.csv
    assert not fp.config["has_trace"]


BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_benchmark_script_runs_within_its_quick_budgets(text_captures):
    """The benchmark's smoke run (``--quick --check``: every shape at 20k rows, 16 synthetic and
    16 real level1 ranks, the small real pair; 3 rounds, ~2 min) in every CI run. It catches a
    change which makes its captures invalid (the 1M-row shapes were once refused by the
    collection-window check), and one that makes a figure worse than benchmarks/budgets.json's
    quick budget by more than the noise measured in the run (doubling the per-rank cost does)."""
    r = subprocess.run([sys.executable, str(BENCH / "bench_scale.py"), "--quick", "--check", "--skip", "ref"],
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout
    assert r.returncode == 0, out[out.find("BUDGETS"):] + r.stderr[-2000:]
    for shape in ("a many short steps", "b LLM-like", "c few giant steps", "d 16 ranks", "real level1 16 ranks"):
        assert shape in out
    assert "trace scan (shape a" in out and "marginal cost" in out
    assert out.count("all reads ") >= 3   # shapes a, b, c (and the growth sizes): the reads perfgate makes
    assert "left for it at 2x" in out or "out of reach before any work" in out
    budgets = out[out.index("BUDGETS"):]
    for name in ("ratio_wall.a", "rank_cpu_ms.synthetic", "rank_cpu_ms.real", "trace_mibs.real", "pair_cpu_s"):
        assert re.search(rf"^   {re.escape(name)} .* pass ", budgets, re.M), budgets


def _bench_scale():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_scale", BENCH / "bench_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_budget_check_fails_a_doubled_cost_and_passes_noise(capsys):
    """``--check``: a figure fails when worse than its budget by more than the spread of its rounds
    (at least the noise floor); a higher-is-better figure fails below budget / (1 + tolerance)."""
    b = _bench_scale()
    budgets = {"noise_floor": 0.1, "quick": {"rank_cpu_ms.real": {"budget": 100, "what": "per rank"},
                                             "trace_mibs.real": {"budget": 200, "what": "scan"},
                                             "pair_wall_s": {"budget": 1.0, "what": "pair"}}}
    within = {"rank_cpu_ms.real": (108, [100, 108, 112], "lower"), "trace_mibs.real": (190, [190, 195], "higher")}
    assert b.check_budgets(within, budgets, "quick")
    out = capsys.readouterr().out
    assert re.search(r"rank_cpu_ms.real +108 +100 +11% +3 +pass", out)
    assert "pair_wall_s" in out and "not measured in this run" in out
    doubled = {"rank_cpu_ms.real": (216, [210, 216, 220], "lower")}
    assert not b.check_budgets(doubled, budgets, "quick")
    assert re.search(r"rank_cpu_ms.real +216 .* FAIL", capsys.readouterr().out)
    assert not b.check_budgets({"trace_mibs.real": (150, [150, 151], "higher")}, budgets, "quick")
    noisy = {"rank_cpu_ms.real": (150, [100, 150, 180], "lower")}   # spread 53 %: within this run's noise
    assert b.check_budgets(noisy, budgets, "quick")


def test_every_quick_and_full_budget_is_a_figure_the_benchmark_measures():
    import json
    b = _bench_scale()
    budgets = json.loads(b.BUDGETS.read_text())
    names = {"ratio_wall.a", "ratio_wall.b", "ratio_wall.c", "rank_cpu_ms.synthetic", "rank_cpu_ms.real",
             "trace_mibs.most_kept", "trace_mibs.real", "pair_wall_s", "pair_cpu_s", "ref_speed", "ref_lean"}
    assert set(budgets["quick"]) <= set(budgets["full"]) == names
    assert set(budgets["quick"]) == names - {"pair_wall_s"}   # a CI machine's load multiplies a fresh process's wall


def test_out_of_memory_is_a_clear_error_not_an_empty_result(tmp_path, policy, monkeypatch):
    """A rank whose tables do not fit in memory: InvalidCaptureError naming the rank and its
    file sizes (exit 3), nothing saved — never a fingerprint with missing rows."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from perfgate.errors import InvalidCaptureError
    from perfgate.app.gate import save_baseline
    from perfgate.store.baselines import BaselineStore
    c = write_scaled(tmp_path / "c", ranks=2, steps=2, kernels_per_step=50)
    real = pacsv.read_csv

    def oom(path, *a, **kw):  # what Arrow raises when an allocation fails
        if "rank1" in str(path):
            raise pa.ArrowMemoryError("malloc of size 1073741824 failed")
        return real(path, *a, **kw)
    monkeypatch.setattr(pacsv, "read_csv", oom)
    store = BaselineStore(tmp_path / "bl")
    with pytest.raises(InvalidCaptureError) as e:
        save_baseline(c, "main", policy=policy, store=store, env={})
    assert "rank 1 does not fit in the memory" in e.value.message and e.value.exit_code == 3
    assert "kernel_details.csv" in e.value.message and "--scheduler" in e.value.hint
    assert not (tmp_path / "bl" / "main.json").exists()


@pytest.mark.slow
def test_out_of_memory_under_a_real_limit(tmp_path):
    """The same through the CLI with RLIMIT_AS too small for one rank's kernel table: exit 3
    and the memory message (not exit 70, not an empty fingerprint)."""
    c = write_scaled(tmp_path / "c", ranks=1, steps=2, kernels_per_step=50_000)  # ~35 MiB of CSV
    probe = subprocess.run([sys.executable, "-c", "import perfgate.app.gate, perfgate.cli, pyarrow.csv, pandas; print(next("
                            "int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize')))"],
                           capture_output=True, text=True)
    limit = int(probe.stdout.strip()) * 1024 + (120 << 20)  # imports + 120 MiB: too little to parse it

    r = subprocess.run([sys.executable, "-m", "perfgate.cli", "fingerprint", str(c), "--workers", "1",
                        "--trace", "never"], capture_output=True, text=True,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert r.returncode == 3, (r.returncode, r.stderr[-800:])
    assert "does not fit in the memory" in r.stderr + r.stdout


@pytest.mark.slow
def test_dask_tasks_take_paths_and_a_shared_config_and_return_small_summaries(cap, policy, monkeypatch):
    """What crosses the wire on ``--scheduler``: each task gets its ranks' locations (paths) and
    a reference to the one copy of the config (policy) sent to the cluster, never the config
    itself; each returns its ranks' summaries (bounded: under 400 KB a rank here), no DataFrame of
    kernel rows."""
    distributed = pytest.importorskip("distributed")
    import pickle
    import perfgate.metrics.fingerprint as fpm
    from perfgate.ingest import RankLocation
    from perfgate.metrics.summary import RankSummary
    sent, merged = [], []
    real_map, real_merge = distributed.Client.map, fpm.fingerprint_from_summaries

    def map_(self, func, *iterables, **kw):
        sent.append((iterables, kw))
        return real_map(self, func, *iterables, **kw)

    def merge(results, *a, **k):
        merged.extend(results)
        return real_merge(results, *a, **k)
    monkeypatch.setattr(distributed.Client, "map", map_)
    monkeypatch.setattr(fpm, "fingerprint_from_summaries", merge)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
        fingerprint_path(cap, policy, scheduler=cl.scheduler_address)
    (iterables, kw), = sent
    assert all(isinstance(loc, RankLocation) for group in iterables[0] for loc in group)
    assert isinstance(kw["config"], distributed.Future)   # the policy is sent once, not per task
    summaries = [r for r in merged if isinstance(r, RankSummary)]
    assert len(summaries) == 4
    for s in summaries:
        table = (cap / s.kernel_file).stat().st_size
        assert len(pickle.dumps(s)) < max(table / 2, 400_000)
    assert s.anatomy is None or len(s.anatomy) == len(s.steps)   # one row per step, not per kernel
