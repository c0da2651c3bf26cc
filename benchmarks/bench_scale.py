#!/usr/bin/env python3
"""Scale benchmarks for perfgate (issue 21): cost per shape against the floor, measured in one run.

Every figure is a ratio measured in this run, on this machine (no timed assertions). The floor
is pyarrow reading the same kernel_details.csv columns perfgate parses, as strings (the cost
of touching the data at all); perfgate is ingest + fingerprint with ``--trace never``, as users
run it (workers by default) and with ``--workers 1`` (one thread).
Rounds are paired (floor, perfgate, floor, perfgate, ...) so load from other jobs hits both. Each
round also times the *typed read*: the same columns parsed into the Arrow types perfgate's reader
asks for (dictionary names, decimal128 µs), the part of the floor-to-perfgate gap that is parsing.

Shapes (``--shapes``):
  a  many short steps: the real level1 rank-0 rows (191 per step) replicated with fresh times
  b  LLM-like: the real st/level2 rank-0 rows (2,463 per step) replicated with fresh times
  c  few giant steps: perfgate.synth.scale (10 steps, no layers)
  d  many ranks: 64 and 1,024 small ranks (perfgate.synth.scale): serial time, per-rank fixed
     cost, --workers 2 vs serial (wall and CPU including children), and the same ranks on a
     dask.distributed cluster of 1 and 2 single-threaded worker processes (``--dask``; scheduler
     and workers each a process of their own, as in CI): wall, the client's CPU (this process)
     and the workers' CPU, with the load average; ``--rank-rows`` sets the rows per rank

Sections (``--skip`` any of growth, trace, ref):
  growth  cost at 100k / 300k / 1M / 3M rows (``--growth``) of ``--growth-shape``: in this process
          (paired with the floor), and ``perfgate fingerprint`` in a fresh process (what users run)
  trace   trace_view.json scan of shape a (most events kept) and of the real level1 trace's
          events repeated to the same size (few kept): MiB/s CPU of the byte-level extractor
          (default), the Arrow line scan and the exact structural scan (jsonscan), and of
          validity.lost_launches' flow pass; same files, same run, child processes
  ref     msprof-analyze ``compare`` (one run) vs ``perfgate check`` (median of 3 runs, as users run
          it; and 3 runs with ``--workers 1``, everything in one process, alternating) on a
          shape-a pair (``--ref-rows``), wall time and peak memory; the reference counts only when it
          wrote its performance_comparison_result_*.xlsx and logged no [ERROR] (exit 0 is not a
          result). Peak memory is the largest sum of PSS over the command's whole process tree,
          sampled every 20 ms with psutil (``pip install psutil``; the ``bench`` extra): a helper
          process is counted, a forked child's shared pages once (msprof-analyze forks one);
          without psutil, GNU time's %M (the largest single process's RSS).

Usage:
  python3 benchmarks/bench_scale.py [--shapes a,b,c,d] [--rows 1000000] [--repeats 2]
      [--growth 100000,300000,1000000,3000000] [--growth-shape a] [--ranks 64,1024]
      [--rank-rows 1000,5000,20000] [--dask 1,2] [--ref-rows N] [--msprof-analyze PATH] [--skip growth,trace,ref] [--quick]

msprof-analyze: ``python3 -m venv V && V/bin/pip install msprof-analyze`` (kept out of
perfgate's environment), then ``--msprof-analyze V/bin/msprof-analyze`` or
PERFGATE_MSPROF_ANALYZE.
"""
from __future__ import annotations

import argparse
import csv
import gc
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import pyarrow as pa  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402

from perfgate.ingest.kernels import pmu_columns  # noqa: E402
from perfgate.policy import load_policy  # noqa: E402
from perfgate.app.run import fingerprint_path  # noqa: E402
from perfgate.synth.replicate import replicate_rank  # noqa: E402
from perfgate.synth.scale import write_scaled  # noqa: E402

NEEDED = ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Stream ID",
          "Wait Time(us)"]
#: the shared data folder, resolved as tests/conftest.py does: $PERFGATE_SHARED, else the
#: repository's sibling folder ../shared (a clone elsewhere sets the variable)
SHARED = Path(os.environ.get("PERFGATE_SHARED") or HERE.parent / "shared")
FIXTURES = SHARED / "fixtures/ascend/msinsight/test"
SOURCES = {"a": FIXTURES / "data/pytorch/text/level1/rank0_ascend_pt",
           "b": FIXTURES / "st/level2/rank_0_ascend_pt"}
SHAPE_NAMES = {"a": "a many short steps (real level1 rows)", "b": "b LLM-like (real st/level2 rows)",
               "c": "c few giant steps (synthetic)", "d": "d ranks"}


def machine():
    mem = "?"
    try:
        mem = f"{int(open('/proc/meminfo').read().split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.machine()}, {os.cpu_count()} cores, {mem}, Python {platform.python_version()}, "
            f"pyarrow {pa.__version__}, load average {load:.1f} at start")


_FAULTS = [0]   # minor page faults of this process during the last _timed call


def _timed(fn):
    """(wall s, CPU s of this process and its finished children) of one call; the call's minor
    page faults (this process) are left in ``_FAULTS[0]``."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    w, c = time.perf_counter(), time.process_time()
    fn()
    _FAULTS[0] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    ch2 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (time.perf_counter() - w,
            time.process_time() - c + (ch2.ru_utime - ch.ru_utime) + (ch2.ru_stime - ch.ru_stime))


def med(v):
    v = sorted(v)
    return v[len(v) // 2]


def build(shape: str, out: Path, rows: int, *, run: int = 0, trace: bool = False, ranks: int = 1,
          rank_rows: int = 1000) -> Path:
    """Write one capture of ``shape`` with about ``rows`` kernel rows per rank."""
    if shape in SOURCES:
        src = SOURCES[shape]
        if not src.is_dir():
            raise SystemExit(f"shape {shape}: real rows not found at {src} (set PERFGATE_SHARED to the "
                             f"folder holding fixtures/ascend)")
        per = _rows_per_step(src)
        return replicate_rank(src, out, steps=max(1, round(rows / per)), run=run, trace=trace)
    if shape == "c":
        return write_scaled(out, ranks=1, steps=10, kernels_per_step=max(1, rows // 10 - 2), run=run,
                            trace_mb=None)
    if shape == "d":
        return write_scaled(out, ranks=ranks, steps=4, kernels_per_step=max(1, rank_rows // 4 - 2), run=run)
    raise SystemExit(f"unknown shape {shape!r}")


def _rows_per_step(src: Path) -> int:
    with open(src / "ASCEND_PROFILER_OUTPUT/kernel_details.csv", newline="") as f:
        return sum(1 for _ in f) - 1


def kernel_files(cap: Path):
    return sorted(cap.rglob("kernel_details.csv"))


def floor_fn(cap: Path, policy):
    """pyarrow reading, as strings, the columns perfgate parses, of every rank's kernel table."""
    files = kernel_files(cap)
    header = next(csv.reader(files[0].open(newline="")))
    needed = [c for c in NEEDED if c in header]
    needed += pmu_columns(header, needed, bool(policy.operators.read_pmu))[0]  # the PMU columns perfgate parses

    def run():
        for f in files:
            pacsv.read_csv(f, convert_options=pacsv.ConvertOptions(
                include_columns=needed, column_types={c: pa.string() for c in needed}))
    return run


def typed_floor_fn(cap: Path, policy):
    """pyarrow reading the same columns as :func:`floor_fn` into the Arrow types perfgate's kernel
    reader asks for (perfgate.ingest.kernels ``_FAST_TYPES``: names as dictionaries, Start / Duration
    as decimal128 with 3 decimals, so that µs arithmetic is exact; other numbers float64): the
    cost of the typed parse alone, before anything perfgate computes."""
    files = kernel_files(cap)
    header = next(csv.reader(files[0].open(newline="")))
    needed = [c for c in NEEDED if c in header]
    needed += pmu_columns(header, needed, bool(policy.operators.read_pmu))[0]
    names = {"Step Id", "Name", "Type", "Accelerator Core", "Stream ID"}
    types = {c: (pa.dictionary(pa.int32(), pa.string()) if c in names else pa.decimal128(38, 3)
                 if c in ("Start Time(us)", "Duration(us)") else pa.float64()) for c in needed}

    def run():
        for f in files:
            pacsv.read_csv(f, convert_options=pacsv.ConvertOptions(
                include_columns=needed, column_types=types, null_values=["N/A", ""], strings_can_be_null=True))
    return run


def reads_fn(cap: Path, policy):
    """Every read perfgate's ``--trace never`` fingerprint makes, done by the libraries alone, with
    nothing computed: the typed kernel parse (:func:`typed_floor_fn`), msgspec decoding each
    communication.json into the typed records perfgate reads (``perfgate.ingest.comm._DECODER``,
    with the cyclic collector paused as perfgate pauses it; orjson's parse into dicts until the
    twelfth session) and pyarrow reading each step_trace_time.csv. What a fingerprint costs beyond
    this is its own work; the issue's 2x-the-floor line leaves ``2 * floor - reads`` seconds for it."""
    from perfgate.ingest.comm import _DECODER
    typed = typed_floor_fn(cap, policy)
    outs = sorted({f.parent for f in kernel_files(cap)})
    comm = [o / "communication.json" for o in outs if (o / "communication.json").is_file()]
    st = [o / "step_trace_time.csv" for o in outs if (o / "step_trace_time.csv").is_file()]

    def run():
        typed()
        gc.disable()
        try:
            for f in comm:
                _DECODER.decode(f.read_bytes())
        finally:
            gc.enable()
        for f in st:
            pacsv.read_csv(f)
    return run


def paired(cap: Path, policy, repeats: int, label: str, rows: int):
    """Floor and perfgate interleaved ``repeats`` times; returns a result row. perfgate runs as
    users run it (``workers`` left to its default: a large kernel table's structure stage in a
    second thread, as the floor reads on every core) and with ``workers=1`` (one thread), in
    alternating order."""
    floor = floor_fn(cap, policy)
    typed = typed_floor_fn(cap, policy)
    reads = reads_fn(cap, policy)

    def ours(workers=None):
        fingerprint_path(cap, policy, workers=workers, with_trace=False)
    floor(), typed(), reads(), ours()  # page cache and imports warm
    fw, fc, ow, oc, of, w1, c1, tw, rw = [], [], [], [], [], [], [], [], []
    for i in range(repeats):
        w, c = _timed(floor)
        fw.append(w)
        fc.append(c)
        tw.append(_timed(typed)[0])
        rw.append(_timed(reads)[0])
        for one in ((False, True) if i % 2 == 0 else (True, False)):
            w, c = _timed(lambda: ours(1 if one else None))
            if one:
                w1.append(w)
                c1.append(c)
            else:
                ow.append(w)
                oc.append(c)
                of.append(_FAULTS[0])
    r = {"shape": label, "rows": rows, "perfgate_faults": med(of), "perfgate_wall": med(ow), "perfgate_cpu": med(oc), "floor_wall": med(fw),
         "floor_cpu": med(fc), "ratio_wall": med([o / f for o, f in zip(ow, fw)]),
         "ratio_cpu": med([o / f for o, f in zip(oc, fc)]), "workers1_wall": med(w1),
         "ratio_wall_workers1": med([o / f for o, f in zip(w1, fw)]), "ratio_cpu_workers1": med([o / f for o, f in zip(c1, fc)]),
         "typed_wall": med(tw), "typed_ratio": med([t / f for t, f in zip(tw, fw)]),
         "ratio_to_typed": med([o / t for o, t in zip(ow, tw)]),
         "reads_wall": med(rw), "reads_ratio": med([x / f for x, f in zip(rw, fw)]),
         "own_wall": med([o - x for o, x in zip(ow, rw)]),
         "own_budget": med([2 * f - x for f, x in zip(fw, rw)])}
    print(f"   {label:44s} {rows:>10,} rows  perfgate {r['perfgate_wall']:7.2f} s wall {r['perfgate_cpu']:7.2f} s CPU"
          f" | floor {r['floor_wall']:6.2f} s wall {r['floor_cpu']:6.2f} s CPU"
          f" | ratio {r['ratio_wall']:5.2f}x wall {r['ratio_cpu']:5.2f}x CPU"
          f" | --workers 1: {r['workers1_wall']:6.2f} s, {r['ratio_wall_workers1']:5.2f}x wall {r['ratio_cpu_workers1']:5.2f}x CPU"
          f" | typed read {r['typed_wall']:5.2f} s = {r['typed_ratio']:4.2f}x the floor, perfgate {r['ratio_to_typed']:4.2f}x it"
          f" | all reads {r['reads_wall']:5.2f} s = {r['reads_ratio']:4.2f}x the floor: perfgate's own work "
          f"{r['own_wall']:5.2f} s against {r['own_budget']:5.2f} s left at 2x", flush=True)
    return r


def bench_shapes(tmp: Path, shapes, rows: int, policy, repeats: int):
    print(f"1. one rank of each shape, ~{rows:,} kernel rows: perfgate (ingest + fingerprint, --trace never) "
          f"vs the floor; {repeats} paired rounds, medians (goal: <= 2x)", flush=True)
    out = []
    for s in shapes:
        if s == "d":
            continue
        cap = build(s, tmp / f"shape_{s}", rows)
        n = sum(_rows_per_step(f.parent.parent) for f in kernel_files(cap))
        out.append(paired(cap, policy, repeats, SHAPE_NAMES[s], n))
        shutil.rmtree(cap)
    return out


def _cli_fingerprint(cap: Path, out: Path) -> tuple[float, float, float, int]:
    """``perfgate fingerprint CAP --trace never -o OUT`` in a fresh process: (wall s, CPU s of
    the process and its children, of which system s, minor page faults)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "perfgate", "fingerprint", str(cap), "--trace", "never", "-o", str(out)],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"perfgate fingerprint failed (rc {r.returncode}): {r.stderr[-800:]}")
    sys_s = after.ru_stime - before.ru_stime
    return wall, (after.ru_utime - before.ru_utime) + sys_s, sys_s, after.ru_minflt - before.ru_minflt


def bench_growth(tmp: Path, shape: str, sizes, policy):
    print(f"2. cost growth, shape {SHAPE_NAMES[shape]}: one paired round per size", flush=True)
    prev = None
    res = []
    for n in sizes:
        cap = build(shape, tmp / f"grow_{n}", n)
        rows = sum(_rows_per_step(f.parent.parent) for f in kernel_files(cap))
        r = paired(cap, policy, 1, f"  growth {shape}", rows)
        per = r["perfgate_cpu"] / rows * 1e6
        grow = "" if prev is None else f", x{r['perfgate_cpu'] / prev[0]:.2f} CPU for x{rows / prev[1]:.2f} rows"
        # minor page faults: on a VM each costs tens of us; a count growing faster than the rows
        # (the allocator handing memory back and faulting it in again) shows up here
        print(f"      {per:6.2f} us CPU per row{grow}; {r['perfgate_faults'] / rows:.3f} minor page faults per row",
              flush=True)
        # what users run: the command in a fresh process (imports, cold allocator, the JSON written)
        # twice, both printed (a single fresh run at 3M rows varied 13-24 s between benchmark
        # runs); system time and page faults say how much of a run went to first touches
        runs = [_cli_fingerprint(cap, tmp / "grow.json") for _ in range(2)]
        w, c = (sum(x[i] for x in runs) / len(runs) for i in (0, 1))
        r["cli_wall"], r["cli_cpu"] = w, c
        cgrow = "" if prev is None else f", x{c / prev[2]:.2f} CPU for x{rows / prev[1]:.2f} rows"
        each = "; ".join(f"{x[0]:.2f} s wall {x[1]:.2f} s CPU ({x[2]:.2f} s system, {x[3] / rows:.2f} faults per row)"
                         for x in runs)
        print(f"      perfgate fingerprint --trace never (fresh process, 2 runs): {each}\n"
              f"        mean {w:.2f} s wall, {c:.2f} s CPU ({c / rows * 1e6:.2f} us per row{cgrow})", flush=True)
        prev = (r["perfgate_cpu"], rows, c)
        res.append(r)
        shutil.rmtree(cap)
    return res


_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from perfgate.ingest import trace as T, validity as V
mode = {mode!r}
T.BYTE_SCAN = mode == "bytes"
if mode == "exact":
    T._ARROW_MIN_BYTES = 1 << 62
if mode == "lost_launches":
    steps = T.read_trace({path!r}).steps
c = time.process_time(); w = time.perf_counter()
if mode == "lost_launches":
    V.lost_launches({path!r}, steps)
    n = kept = 0
else:
    tr = T.read_trace({path!r})
    n, kept = tr.n_events, len(tr.overlap)
print(time.perf_counter() - w, time.process_time() - c, n, kept)
"""

TRACE_MODES = (("byte-level extractor (default)", "bytes"), ("Arrow line scan", "arrow"),
               ("exact structural scan", "exact"), ("lost_launches (flow pass)", "lost_launches"))


def _real_shaped_trace(out: Path, mib: float) -> Path:
    """The real level1 rank-0 trace_view.json's events repeated to about ``mib`` MiB: every
    event kind of a real capture (cpu_op with call stacks, flows, counters, a few kept)."""
    src = (SOURCES["a"] / "ASCEND_PROFILER_OUTPUT/trace_view.json").read_bytes().strip()
    body = src[1:-1].strip()
    out.mkdir(parents=True, exist_ok=True)
    p = out / "trace_view.json"
    with open(p, "wb") as f:
        f.write(b"[" + body)
        for _ in range(max(0, round(mib * 2**20 / len(body)) - 1)):
            f.write(b", " + body)
        f.write(b"]")
    return p


def bench_trace(tmp: Path, rows: int):
    cap = build("a", tmp / "trace_a", rows, trace=True)
    files = [("shape a, most events kept", next(cap.rglob("trace_view.json")))]
    files.append(("real level1 events repeated, few kept",
                  _real_shaped_trace(tmp / "trace_real", files[0][1].stat().st_size / 2**20)))
    out = {}
    for what, tv in files:
        mib = tv.stat().st_size / 2**20
        print(f"3. trace_view.json scan, {what} ({mib:,.0f} MiB), in child processes, paired, CPU time "
              f"(goal: >= 200 MiB/s)", flush=True)
        res = {}
        for _ in range(2):
            for label, mode in TRACE_MODES:
                o = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(HERE), path=str(tv), mode=mode)],
                                   capture_output=True, text=True, check=True).stdout.split()
                res.setdefault(label, []).append((float(o[0]), float(o[1]), int(o[2]), int(o[3])))
        for label, v in res.items():
            w, c = med([x[0] for x in v]), med([x[1] for x in v])
            kept = f"({v[0][2]:,} events, {v[0][3]:,} kept)" if v[0][2] else ""
            print(f"   {label:32s} {mib / w:7.1f} MiB/s wall {mib / c:7.1f} MiB/s CPU {c:6.2f} s {kept}", flush=True)
        cpu = {mode: med([x[1] for x in res[label]]) for label, mode in TRACE_MODES}
        out[what] = {"mib": mib, **{f"{m}_mibs_cpu": mib / c for m, c in cpu.items()}}
    shutil.rmtree(cap)
    shutil.rmtree(tmp / "trace_real")
    return out


def _dask_cluster(n_workers: int):
    """A dask.distributed cluster as CI runs one: a scheduler and ``n_workers`` worker processes
    (``dask worker --nthreads 1``: perfgate's per-rank work holds the GIL about half the time, so
    one thread per worker process), each its own process, none in this one (this process is the
    client alone, so its CPU time is the client's). Returns ``(address, processes)``."""
    import socket
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--no-dashboard"], **quiet)]
    addr = f"tcp://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as sk:
            if sk.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    procs += [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", addr, "--nthreads", "1",
                                "--no-dashboard"], **quiet) for _ in range(n_workers)]
    from distributed import Client
    with Client(addr) as c:
        c.wait_for_workers(n_workers, timeout=120)
    return addr, procs


def _tree_cpu(procs) -> float:
    """CPU seconds (user + system) so far of these processes and their descendants (psutil;
    NaN without it)."""
    try:
        import psutil
    except ImportError:
        return float("nan")
    total = 0.0
    for p in procs:
        try:
            q = psutil.Process(p.pid)
            for r in [q, *q.children(recursive=True)]:
                t = r.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            pass
    return total


def bench_dask(tmp: Path, cap: Path, policy, workers, serial):
    """The same ranks fanned out on a dask.distributed cluster of 1, 2, ... single-threaded worker
    processes (:func:`_dask_cluster`; ``fingerprint_path(..., scheduler=...)``), warmed (each worker
    has imported perfgate on a small capture first): wall time, this process's CPU (the client:
    sending paths, receiving summaries, the merge), the workers' CPU (psutil), and the load
    average, against ``serial`` ``(wall, CPU)`` in this process."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        print("      dask: distributed not installed (pip install 'perfgate[dask]')", flush=True)
        return None
    warm = build("d", tmp / "dask_warm", 0, ranks=max(workers), rank_rows=200)
    out = {}
    for w in workers:
        addr, procs = _dask_cluster(w)
        try:
            fingerprint_path(warm, policy, scheduler=addr, with_trace=False)
            k0 = _tree_cpu(procs[1:])
            t, c = time.perf_counter(), time.process_time()
            fingerprint_path(cap, policy, scheduler=addr, with_trace=False)
            out[w] = {"wall": time.perf_counter() - t, "client_cpu": time.process_time() - c,
                      "workers_cpu": _tree_cpu(procs[1:]) - k0, "load": os.getloadavg()[0]}
        finally:
            for p in procs[::-1]:
                p.terminate()
            for p in procs:
                p.wait()
    shutil.rmtree(warm)
    for w, r in out.items():
        print(f"      dask, {w} worker{'s' if w > 1 else ' '}: {r['wall']:7.2f} s wall (x{serial[0] / r['wall']:4.2f} vs "
              f"serial), client {r['client_cpu']:5.2f} s CPU, workers {r['workers_cpu']:6.2f} s CPU "
              f"(x{r['workers_cpu'] / serial[1]:4.2f} serial's CPU); load {r['load']:.1f}", flush=True)
    return out


def bench_ranks(tmp: Path, counts, rank_rows: int, policy, dask_workers=()):
    print(f"4. ranks x {rank_rows:,} kernel rows (perfgate.synth.scale), serial in this process; "
          f"per-rank cost = time / ranks (goal: <= 50 ms)", flush=True)
    res = []
    for n in counts:
        cap = build("d", tmp / f"ranks_{n}", 0, ranks=n, rank_rows=rank_rows)
        floor = floor_fn(cap, policy)
        floor()
        fw, fc = _timed(floor)
        sw, sc = _timed(lambda: fingerprint_path(cap, policy, workers=1, with_trace=False))
        r = {"shape": f"d {n} ranks", "rows": n * rank_rows, "perfgate_wall": sw, "perfgate_cpu": sc,
             "floor_wall": fw, "floor_cpu": fc, "ratio_wall": sw / fw, "ratio_cpu": sc / fc}
        line = (f"   {n:5d} ranks x {rank_rows:,} rows: serial {sw:7.2f} s wall {sc:7.2f} s CPU = "
                f"{sc / n * 1000:6.1f} ms CPU per rank (load {os.getloadavg()[0]:.1f})"
                f" | floor {fw:6.2f} s | ratio {sw / fw:6.2f}x wall {sc / fc:6.2f}x CPU")
        if n <= 64:
            pw, pc = _timed(lambda: fingerprint_path(cap, policy, workers=2, with_trace=False))
            line += f" | --workers 2: {pw:6.2f} s wall ({sw / pw:4.2f}x), {pc:6.2f} s CPU ({pc / sc:4.2f}x serial)"
            r["workers2"] = (pw, pc)
        print(line, flush=True)
        if dask_workers:
            r["dask"] = bench_dask(tmp, cap, policy, dask_workers, (sw, sc))
        res.append(r)
        shutil.rmtree(cap)
    if len(res) >= 2:
        a, b = res[0], res[-1]
        na, nb = a["rows"] // rank_rows, b["rows"] // rank_rows
        per = (b["perfgate_cpu"] - a["perfgate_cpu"]) / (nb - na)
        print(f"   serial scaling {na} -> {nb} ranks: x{b['perfgate_cpu'] / a['perfgate_cpu']:.1f} CPU for "
              f"x{nb / na:.0f} ranks; marginal cost {per * 1000:.1f} ms CPU per rank", flush=True)
    return res


def _peak_mib(stderr: str) -> float:
    m = re.findall(r"^(\d+)$", stderr, re.M)
    return int(m[-1]) / 1024 if m else float("nan")


def run_measured(cmd, **kw):
    """Run ``cmd``; returns (wall s, peak memory MiB, CompletedProcess-like result, caliber).
    The peak is the largest sum of PSS (proportional set size: a page shared by n processes
    counts 1/n in each, so a forked child's copy-on-write pages are counted once) over the
    process and all its descendants (psutil, sampled every 20 ms), else GNU time's %M of the
    largest single process."""
    t = time.perf_counter()
    try:
        import psutil
    except ImportError:
        r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, **kw)
        return time.perf_counter() - t, _peak_mib(r.stderr), r, "largest process (GNU time %M)"
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = psutil.Popen(cmd, stdout=out, stderr=err, text=True, **kw)
        peak = 0
        while p.poll() is None:
            try:
                procs = [p, *p.children(recursive=True)]
            except psutil.Error:
                procs = [p]
            total = 0
            for q in procs:
                try:
                    total += q.memory_full_info().pss   # shared pages (a forked child's) counted once
                except psutil.Error:
                    pass
            peak = max(peak, total)
            time.sleep(0.02)
        wall = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        r = subprocess.CompletedProcess(cmd, p.returncode, out.read(), err.read())
    return wall, peak / 2**20, r, "process tree, summed PSS (psutil)"


def bench_ref(tmp: Path, exe: str | None, rows: int, policy):
    exe = exe or os.environ.get("PERFGATE_MSPROF_ANALYZE") or shutil.which("msprof-analyze")
    if not exe:
        print("5. msprof-analyze not found: install it into a separate venv and pass --msprof-analyze PATH")
        return None
    print(f"5. msprof-analyze compare vs perfgate check, shape a pair (~{rows:,} rows per side, with trace), "
          f"msprof-analyze once, perfgate check median of 3; wall and peak memory (goal: >= 30x faster, "
          f">= 5x leaner)", flush=True)
    from perfgate.app.gate import save_baseline
    from perfgate.store.baselines import BaselineStore
    a = build("a", tmp / "ref_a", rows, trace=True)
    b = build("a", tmp / "ref_b", rows, run=1, trace=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))

    caliber = []

    def timed(cmd):
        w, mib, r, cal = run_measured(cmd, cwd=tmp, env=env)
        caliber.append(cal)
        return w, mib, r
    bl = tmp / "bl"
    save_baseline(a / "rank0_ascend_pt", "b", policy=policy, store=BaselineStore(bl), env={}, force=True)
    os.sync()  # the pair was just written: its writeback must not land inside a timed run
    out = tmp / "pgout"
    check = [sys.executable, "-m", "perfgate", "check", "--baseline", "b", str(b / "rank0_ascend_pt"),
             "--baseline-dir", str(bl), "--out", str(out), "--quiet", "--trace", "always"]
    runs, serial = [], []
    for _ in range(3):  # alternating: as users run it (the timeline may be scanned in a second process), in-process
        runs.append(timed(check))
        serial.append(timed([*check, "--workers", "1"]))
    pg = sorted(runs, key=lambda r: r[0])[1]  # the median of 3 runs (wall)
    pg1 = sorted(serial, key=lambda r: r[0])[1]
    print(f"   perfgate check runs: {', '.join(f'{r[0]:.2f}' for r in runs)} s wall (median taken); "
          f"with --workers 1: {', '.join(f'{r[0]:.2f}' for r in serial)} s; peak memory: {caliber[0]}", flush=True)
    pg_ok = (out / "perfgate-result.json").is_file()
    msout = tmp / "msout"
    ms = timed([exe, "compare", "-d", str(b / "rank0_ascend_pt"), "-bp", str(a / "rank0_ascend_pt"), "-o", str(msout)])
    xlsx = sorted(msout.glob("performance_comparison_result_*.xlsx"))
    log = ms[2].stdout + ms[2].stderr
    ms_ok = bool(xlsx) and xlsx[0].stat().st_size > 0 and "[ERROR]" not in log
    why = "" if ms_ok else (f" -- REFERENCE FAILED (rc {ms[2].returncode}, no xlsx or an [ERROR] logged: "
                            f"{[ln for ln in log.splitlines() if 'ERROR' in ln][:1]})")
    print(f"   msprof-analyze {ms[0]:8.2f} s {ms[1]:7,.0f} MiB (rc {ms[2].returncode}, xlsx "
          f"{'written' if xlsx else 'MISSING'}){why}", flush=True)
    print(f"   perfgate check {pg[0]:8.2f} s {pg[1]:7,.0f} MiB (rc {pg[2].returncode}, result "
          f"{'written' if pg_ok else 'MISSING'}); --workers 1: {pg1[0]:.2f} s {pg1[1]:,.0f} MiB", flush=True)
    if ms_ok and pg_ok:
        print(f"   perfgate is {ms[0] / pg[0]:.1f}x faster and {ms[1] / pg[1]:.1f}x leaner "
              f"(--workers 1: {ms[0] / pg1[0]:.1f}x faster, {ms[1] / pg1[1]:.1f}x leaner)", flush=True)
        return {"speed": ms[0] / pg[0], "lean": ms[1] / pg[1], "ms": ms[:2], "pg": pg[:2],
                "speed1": ms[0] / pg1[0], "lean1": ms[1] / pg1[1]}
    return None


def summary(rows, trace, ref):
    print("\nSUMMARY (worst shape first; ratios to the floor measured in this run; goal <= 2x)")
    print(f"   {'shape':44s} {'rows':>10s} {'perfgate s':>11s} {'floor s':>8s} {'ratio wall':>11s} {'ratio CPU':>10s}"
          f" {'--workers 1 wall':>17s}")
    for r in sorted(rows, key=lambda r: -r["ratio_wall"]):
        one = f"{r['ratio_wall_workers1']:>16.2f}x" if "ratio_wall_workers1" in r else ""
        print(f"   {r['shape']:44s} {r['rows']:>10,} {r['perfgate_wall']:>11.2f} {r['floor_wall']:>8.2f} "
              f"{r['ratio_wall']:>10.2f}x {r['ratio_cpu']:>9.2f}x {one}")
        if "reads_wall" in r:
            print(f"   {'':44s} reads alone {r['reads_ratio']:.2f}x the floor; own work {r['own_wall']:.2f} s, "
                  f"{r['own_budget']:.2f} s left for it at 2x ({r['own_wall'] / max(r['own_budget'], 1e-9):.1f}x over)"
                  if r["own_budget"] > 0 else
                  f"   {'':44s} reads alone {r['reads_ratio']:.2f}x the floor: 2x is out of reach before any work")
    for what, t in (trace or {}).items():
        print(f"   trace scan ({what}, {t['mib']:,.0f} MiB): {t['bytes_mibs_cpu']:.0f} MiB/s CPU (Arrow line scan "
              f"{t['arrow_mibs_cpu']:.0f}, exact scan {t['exact_mibs_cpu']:.0f}; lost_launches "
              f"{t['lost_launches_mibs_cpu']:.0f} MiB/s CPU); goal >= 200 MiB/s")
    if ref:
        print(f"   check vs msprof-analyze compare: {ref['speed']:.1f}x faster, {ref['lean']:.1f}x leaner "
              f"(--workers 1: {ref['speed1']:.1f}x, {ref['lean1']:.1f}x) (goal >= 30x, >= 5x)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="a,b,c,d")
    ap.add_argument("--rows", type=int, default=1_000_000, help="kernel rows per rank for shapes a, b, c")
    ap.add_argument("--repeats", type=int, default=2, help="paired rounds per shape")
    ap.add_argument("--growth", default="100000,300000,1000000,3000000", help="row counts ('' skips)")
    ap.add_argument("--growth-shape", default="a")
    ap.add_argument("--ranks", default="64,1024")
    ap.add_argument("--rank-rows", default="1000", help="kernel rows per rank of shape d; several, comma-separated")
    ap.add_argument("--dask", default="1,2", help="shape d on a local dask cluster of these worker counts ('' skips)")
    ap.add_argument("--ref-rows", type=int, default=None, help="rows per side of the reference pair (default --rows)")
    ap.add_argument("--msprof-analyze", default=None, help="path to the msprof-analyze executable")
    ap.add_argument("--skip", default="", help="comma-separated: growth, trace, ref")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test of the script)")
    a = ap.parse_args()
    if a.quick:
        a.rows, a.growth, a.ranks, a.rank_rows, a.repeats, a.dask = 20_000, "10000,20000", "4,16", 200, 1, ""
    shapes = [s.strip() for s in a.shapes.split(",") if s.strip()]
    skip = {s.strip().lower() for s in a.skip.split(",") if s.strip()}
    policy = load_policy()
    from perfgate.hostmem import arrow_jemalloc, defrag_mode, small_pages
    # as the CLI runs every command (the in-process timings are library calls); the floor's
    # pyarrow read runs in this process too, so it uses the same Arrow pool
    with small_pages() as off, arrow_jemalloc() as jem:
        import pyarrow as _pa
        print(f"perfgate scale benchmarks on {machine()}; THP defrag {defrag_mode()}, numpy huge-page hint "
              f"{'off (perfgate.hostmem)' if off else 'as numpy set it'}; Arrow pool "
              f"{_pa.default_memory_pool().backend_name}{' (perfgate.hostmem)' if jem else ''}", flush=True)
        _main(a, shapes, skip, policy)


def _main(a, shapes, skip, policy):
    rows, trace, ref = [], None, None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows += bench_shapes(tmp, shapes, a.rows, policy, a.repeats)
        if "growth" not in skip and a.growth:
            bench_growth(tmp, a.growth_shape, [int(x) for x in a.growth.split(",")], policy)
        if "trace" not in skip and "a" in shapes:
            trace = bench_trace(tmp, a.rows)
        if "d" in shapes:
            for rank_rows in (int(x) for x in str(a.rank_rows).split(",") if x.strip()):
                rows += bench_ranks(tmp, [int(x) for x in a.ranks.split(",")], rank_rows, policy,
                                    [int(x) for x in a.dask.split(",") if x.strip()] if a.dask else ())
        if "ref" not in skip:
            ref = bench_ref(tmp, a.msprof_analyze, a.ref_rows or a.rows, policy)
    summary(rows, trace, ref)


if __name__ == "__main__":
    main()
