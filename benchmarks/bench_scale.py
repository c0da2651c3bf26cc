#!/usr/bin/env python3
"""Scale benchmarks for perfgate: cost per shape against the floor, measured in one run.

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
  r  real ranks (``--real-ranks``, default 64): the real level1 rank 0 (191 kernel rows per step,
     ``--real-rank-steps`` steps, its trace_view.json and communication.json) as N distinct ranks,
     each its own rank id and its own times, written by the shared tools/scenarios builder (never
     imports perfgate; rank r is its ``identity`` scenario with ``--noise --seed r+1``) or
     ``--rank-builder perfgate``; serial, trace read: ms CPU per rank, and the same with
     ``--trace never``

Sections (``--skip`` any of growth, trace, ref, pair):
  growth  cost at 100k / 300k / 1M / 3M rows (``--growth``) of ``--growth-shape``: in this process
          (paired with the floor), and ``perfgate fingerprint`` in a fresh process (what users run)
  trace   trace_view.json scan of shape a (most events kept) and of the real level1 trace's
          events repeated to the same size (few kept): MiB/s CPU of the byte-level extractor
          (default), the Arrow line scan and the exact structural scan (jsonscan), and of
          validity.lost_launches' flow pass; same files, same run, child processes
  ref     msprof-analyze ``compare`` vs ``perfgate check`` on a shape-a pair (``--ref-rows``), both
          measured the same way, as a user runs them: wall time is the median of runs nothing
          watches (``check`` and ``check --workers 1`` alternating, 3 each; msprof-analyze
          ``--ref-runs``, 3); peak memory is the largest summed PSS of the command's process tree
          (a helper process counted, a forked child's shared pages once; psutil, the ``bench`` extra)
          in one more run of each command that is not timed, sampled every 0.1 s (sampling
          /proc/PID/smaps_rollup every 20 ms inside the timed run slowed msprof-analyze from 311 s
          to 515 s). ``--no-pss`` or no psutil: the largest single process's ru_maxrss of the timed
          runs (wait4). The reference counts only when every run wrote its
          performance_comparison_result_*.xlsx and logged no [ERROR] (exit 0 is not a result).
  pair    ``perfgate check``, the real text level1 capture as baseline and level2 as candidate
          (2 ranks x 191 rows), ``--pair-runs`` fresh processes (5), median wall (goal < 1 s)

``--check`` holds the figures to benchmarks/budgets.json (``quick`` budgets with ``--quick``, else
``full``), with at least 3 rounds of each: one line per budget (measured, budget, tolerance,
pass / FAIL), exit 1 when a figure is worse than its budget by more than the tolerance, the spread
of its rounds in this run (at least the file's ``noise_floor``).

Results: a run without ``--quick`` merges its figures (each with date, commit and load average)
into benchmarks/results/last_full.json (``--results PATH``, ``--no-results``);
``--write-readme`` only regenerates README.md's performance table from that file
(benchmarks/perf_table.py).

Usage:
  python3 benchmarks/bench_scale.py [--shapes a,b,c,d,r] [--rows 1000000] [--repeats 2]
      [--growth 100000,300000,1000000,3000000] [--growth-shape a] [--ranks 64,1024]
      [--rank-rows 1000,5000,20000] [--real-ranks 64] [--dask 1,2] [--ref-rows N] [--ref-runs 3]
      [--msprof-analyze PATH] [--skip growth,trace,ref,pair] [--quick] [--check] [--write-readme]

msprof-analyze: ``python3 -m venv V && V/bin/pip install msprof-analyze`` (kept out of
perfgate's environment), then ``--msprof-analyze V/bin/msprof-analyze`` or
PERFGATE_MSPROF_ANALYZE.
"""
from __future__ import annotations

import argparse
import csv
import gc
import json
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
sys.path.insert(0, str(HERE / "benchmarks"))

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
         "ratio_wall_rounds": [o / f for o, f in zip(ow, fw)],
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
        if s in ("d", "r"):   # rank counts: section 4
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


def bench_trace(tmp: Path, rows: int, rounds: int = 2):
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
        for _ in range(rounds):
            for label, mode in TRACE_MODES:
                o = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(HERE), path=str(tv), mode=mode)],
                                   capture_output=True, text=True, check=True).stdout.split()
                res.setdefault(label, []).append((float(o[0]), float(o[1]), int(o[2]), int(o[3])))
        for label, v in res.items():
            w, c = med([x[0] for x in v]), med([x[1] for x in v])
            kept = f"({v[0][2]:,} events, {v[0][3]:,} kept)" if v[0][2] else ""
            print(f"   {label:32s} {mib / w:7.1f} MiB/s wall {mib / c:7.1f} MiB/s CPU {c:6.2f} s {kept}", flush=True)
        cpu = {mode: med([x[1] for x in res[label]]) for label, mode in TRACE_MODES}
        out[what] = {"mib": mib, **{f"{m}_mibs_cpu": mib / c for m, c in cpu.items()},
                     "bytes_rounds": [mib / x[1] for x in res[TRACE_MODES[0][0]]]}
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


def bench_ranks(tmp: Path, counts, rank_rows: int, policy, dask_workers=(), rounds: int = 1):
    print(f"4. ranks x {rank_rows:,} kernel rows (perfgate.synth.scale), serial in this process; "
          f"per-rank cost = CPU / ranks, median of {rounds} round(s) paired with the floor (goal: <= 50 ms)", flush=True)
    res = []
    for n in counts:
        cap = build("d", tmp / f"ranks_{n}", 0, ranks=n, rank_rows=rank_rows)
        r = _ranks_rounds(cap, policy, n, rounds, f"d {n} ranks x {rank_rows:,} rows", n * rank_rows)
        sw, sc = r["perfgate_wall"], r["perfgate_cpu"]
        line = (f"   {n:5d} ranks x {rank_rows:,} rows: serial {sw:7.2f} s wall {sc:7.2f} s CPU = "
                f"{r['cpu_ms']:6.1f} ms CPU per rank (load {os.getloadavg()[0]:.1f})"
                f" | floor {r['floor_wall']:6.2f} s | ratio {r['ratio_wall']:6.2f}x wall {r['ratio_cpu']:6.2f}x CPU")
        if n <= 64:
            pw, pc = _timed(lambda: fingerprint_path(cap, policy, workers=2, with_trace=False))
            line += f" | --workers 2: {pw:6.2f} s wall ({sw / pw:4.2f}x), {pc:6.2f} s CPU ({pc / sc:4.2f}x serial)"
            r["workers2"] = (pw, pc)
        print(line, flush=True)
        if dask_workers:
            r["dask"] = bench_dask(tmp, cap, policy, dask_workers, (sw, sc))
        res.append(r)
        shutil.rmtree(cap)
    _marginal(res, counts)
    return res


def _ranks_rounds(cap: Path, policy, n: int, rounds: int, label: str, rows: int, with_trace=False) -> dict:
    """``rounds`` paired rounds (floor, then perfgate serial: ``workers=1``) over the ``n`` ranks
    of ``cap``; medians, ms CPU per rank and its rounds."""
    floor = floor_fn(cap, policy)
    floor()
    fw, fc, sw, sc = [], [], [], []
    for _ in range(rounds):
        w, c = _timed(floor)
        fw.append(w)
        fc.append(c)
        w, c = _timed(lambda: fingerprint_path(cap, policy, workers=1, with_trace=with_trace))
        sw.append(w)
        sc.append(c)
    return {"shape": label, "rows": rows, "ranks": n, "perfgate_wall": med(sw), "perfgate_cpu": med(sc),
            "floor_wall": med(fw), "floor_cpu": med(fc), "ratio_wall": med([s / f for s, f in zip(sw, fw)]),
            "ratio_cpu": med([s / f for s, f in zip(sc, fc)]), "cpu_ms": med(sc) / n * 1000,
            "cpu_ms_rounds": [c / n * 1000 for c in sc]}


def _marginal(res, counts) -> None:
    if len(res) >= 2:
        a, b = res[0], res[-1]
        na, nb = counts[0], counts[-1]
        per = (b["perfgate_cpu"] - a["perfgate_cpu"]) / (nb - na)
        print(f"   serial scaling {na} -> {nb} ranks: x{b['perfgate_cpu'] / a['perfgate_cpu']:.1f} CPU for "
              f"x{nb / na:.0f} ranks; marginal cost {per * 1000:.1f} ms CPU per rank", flush=True)


#: the independent capture builder (never imports perfgate): tools/scenarios of the shared folder
SCENARIOS = SHARED / "tools/scenarios"

_REAL_RANKS = """
import json, shutil, sys, tempfile
from pathlib import Path
sys.path.insert(0, {tool!r})
import scenarios
src, out, n, steps = Path({src!r}), Path({out!r}), {n!r}, {steps!r}
out.mkdir(parents=True, exist_ok=True)
for r in range(n):
    with tempfile.TemporaryDirectory() as t:
        rd = Path(scenarios.make(src, t, "identity", steps=steps, seed=r + 1, noise=True)["rank_dir"])
        for f in rd.glob("profiler_info_*.json"):
            info = json.loads(f.read_text())
            info["rank_id"] = r
            f.unlink()
            (rd / f"profiler_info_{{r}}.json").write_text(json.dumps(info, indent=1))
        shutil.move(str(rd), str(out / f"rank{{r}}_ascend_pt"))
"""


def build_real_ranks(out: Path, n: int, steps: int = 1, builder: str = "scenarios") -> Path:
    """``n`` ranks made of the real level1 rank 0 (its kernel rows over ``steps`` steps, its
    trace_view.json, communication.json and step_trace_time.csv), each a distinct rank: its own
    rank id (``profiler_info_<r>.json``, ``rank<r>_ascend_pt``) and its own times.

    ``builder="scenarios"``: the shared scenarios tool (``SCENARIOS``; it never imports perfgate),
    in one child process: rank r is that tool's ``identity`` scenario with ``--noise --seed r+1``
    (a re-run of the same job: every compute row x lognormal(0, 0.05), every collective x
    lognormal(0, 0.25), later tasks moved, the trace, communication.json and step trace re-timed
    consistently). ``builder="perfgate"`` (or the tool absent): ``perfgate.synth.replicate``,
    ranks shifted 11.5 s apart, traces of the kept events only."""
    src = SOURCES["a"]
    if builder == "scenarios" and (SCENARIOS / "scenarios.py").is_file():
        subprocess.run([sys.executable, "-c", _REAL_RANKS.format(tool=str(SCENARIOS), src=str(src), out=str(out),
                                                                 n=n, steps=steps)], check=True)
        return out
    return replicate_rank(src, out, steps=steps, ranks=n, trace=True)


def bench_real_ranks(tmp: Path, counts, policy, steps: int = 1, rounds: int = 1, builder: str = "scenarios"):
    """Per-rank cost on real-shaped ranks (:func:`build_real_ranks`), serial, trace read."""
    used = builder if builder == "perfgate" or (SCENARIOS / "scenarios.py").is_file() else "perfgate"
    rows = _rows_per_step(SOURCES["a"]) * steps
    print(f"4b. real level1 ranks ({rows} kernel rows, trace_view.json, communication.json; built by "
          f"{'tools/scenarios, noise seed = rank + 1' if used == 'scenarios' else 'perfgate.synth.replicate'}), "
          f"serial, trace read; per-rank cost = CPU / ranks, median of {rounds} round(s) (goal: <= 50 ms)", flush=True)
    res = []
    for n in counts:
        cap = build_real_ranks(tmp / f"real_ranks_{n}", n, steps, used)
        r = _ranks_rounds(cap, policy, n, rounds, f"real level1 {n} ranks", n * rows, with_trace=True)
        r["rank_rows"], r["builder"] = rows, used
        # the same ranks with --trace never: how much of a rank's cost is its trace_view.json
        r["no_trace_cpu_ms"] = _timed(lambda: fingerprint_path(cap, policy, workers=1, with_trace=False))[1] / n * 1000
        print(f"   {n:5d} ranks: serial {r['perfgate_wall']:7.2f} s wall {r['perfgate_cpu']:7.2f} s CPU = "
              f"{r['cpu_ms']:6.1f} ms CPU per rank (rounds {', '.join(f'{v:.1f}' for v in r['cpu_ms_rounds'])}); "
              f"--trace never {r['no_trace_cpu_ms']:6.1f} ms | floor {r['floor_wall']:6.2f} s", flush=True)
        res.append(r)
        shutil.rmtree(cap)
    _marginal(res, counts)
    return res


#: runs a command for :func:`run_unsampled` from a small process (``python3 -I``: no site
#: packages), timing it there and printing [wall s, ru_maxrss KiB, CPU s, exit code] from wait4()
_LAUNCH = """
import json, os, subprocess, sys, time
out, err, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(out, "w") as o, open(err, "w") as e:
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=o, stderr=e)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
print(json.dumps([wall, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, os.waitstatus_to_exitcode(status)]))
"""


def run_unsampled(cmd, **kw):
    """Run ``cmd`` with nothing watching it; returns (wall s, MiB, CompletedProcess, CPU s). The
    MiB is ``ru_maxrss`` from ``wait4()``: the largest resident set of the process or of any
    descendant it waited for (Linux), i.e. the largest single process, not a sum; free to read,
    so the timed run is the run measured. CPU s: user + system of the process and the descendants
    it waited for. The command is started by a small launcher process (``_LAUNCH``), which also
    times it: a child started by vfork + exec (CPython's subprocess) inherits its parent's
    high-water RSS into its own ru_maxrss, so one started from this process, which has held
    million-row tables, would report at least this process's peak; from the launcher the floor is
    the launcher's ~10 MiB."""
    with tempfile.TemporaryDirectory() as d:
        out, err = Path(d) / "out", Path(d) / "err"
        r = subprocess.run([sys.executable, "-I", "-c", _LAUNCH, str(out), str(err), *map(str, cmd)],
                           capture_output=True, text=True, **kw)
        if r.returncode != 0:
            raise SystemExit(f"launcher failed for {cmd[:3]}: {r.stderr[-800:]}")
        wall, maxrss_kib, cpu, rc = json.loads(r.stdout)
        done = subprocess.CompletedProcess(cmd, rc, out.read_text(errors="replace"), err.read_text(errors="replace"))
    return wall, maxrss_kib / 1024, done, cpu


def tree_pss_peak(cmd, interval: float = 0.1, **kw) -> float | None:
    """Peak of the summed PSS (proportional set size: a page shared by n processes counts 1/n in
    each, so a forked child's copy-on-write pages count once) of ``cmd`` and all its descendants,
    sampled every ``interval`` s with psutil, in a run that is *not* timed (reading
    /proc/PID/smaps_rollup walks the address space under the process's memory-map lock:
    sampled every 20 ms, msprof-analyze's compare took 515 s against 311 s unwatched). None
    without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    with tempfile.TemporaryFile("w+") as out:
        p = psutil.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, **kw)
        peak = 0
        while p.poll() is None:
            try:
                procs = [p, *p.children(recursive=True)]
            except psutil.Error:
                procs = [p]
            total = 0
            for q in procs:
                try:
                    total += q.memory_full_info().pss
                except psutil.Error:
                    pass
            peak = max(peak, total)
            time.sleep(interval)
    return peak / 2**20


def _spread(values) -> float:
    """(max - min) / median of one figure's rounds: the machine's noise on it (0 for one round)."""
    values = [v for v in values if v == v]
    return (max(values) - min(values)) / med(values) if len(values) > 1 and med(values) else 0.0


def _msprof_version(exe: str) -> str:
    pip = Path(exe).with_name("pip")
    if pip.is_file():
        r = subprocess.run([str(pip), "show", "msprof-analyze"], capture_output=True, text=True)
        m = re.search(r"^Version: (\S+)", r.stdout, re.M)
        if m:
            return m.group(1)
    return "?"


def bench_ref(tmp: Path, exe: str | None, rows: int, policy, runs: int = 3, ms_runs: int = 3, pss: bool = True):
    """msprof-analyze ``compare`` against ``perfgate check`` on a shape-a pair with traces, both
    measured the same way: wall time is the median of un-sampled runs (:func:`run_unsampled`;
    ``check`` and ``check --workers 1`` alternate, ``runs`` each; msprof-analyze ``ms_runs``);
    peak memory is the summed PSS of the process tree from one more run of each command that is
    not timed (:func:`tree_pss_peak`, ``pss``), else the largest single process's ru_maxrss of
    the timed runs. The reference counts only when every run wrote its xlsx and logged no
    [ERROR]."""
    exe = exe or os.environ.get("PERFGATE_MSPROF_ANALYZE") or shutil.which("msprof-analyze")
    if not exe:
        print("5. msprof-analyze not found: install it into a separate venv and pass --msprof-analyze PATH")
        return None
    print(f"5. msprof-analyze compare vs perfgate check, shape a pair (~{rows:,} rows per side, with trace): "
          f"wall = median of un-sampled runs (check {runs}, msprof-analyze {ms_runs}); peak memory = summed PSS "
          f"of the process tree in one more, untimed run of each (goal: >= 30x faster, >= 5x leaner)", flush=True)
    from perfgate.app.gate import save_baseline
    from perfgate.store.baselines import BaselineStore
    a = build("a", tmp / "ref_a", rows, trace=True)
    b = build("a", tmp / "ref_b", rows, run=1, trace=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    bl = tmp / "bl"
    save_baseline(a / "rank0_ascend_pt", "b", policy=policy, store=BaselineStore(bl), env={}, force=True)
    os.sync()  # the pair was just written: its writeback must not land inside a timed run
    out = tmp / "pgout"
    check = [sys.executable, "-m", "perfgate", "check", "--baseline", "b", str(b / "rank0_ascend_pt"),
             "--baseline-dir", str(bl), "--out", str(out), "--quiet", "--trace", "always"]
    msout = tmp / "msout"
    ms_cmd = [exe, "compare", "-d", str(b / "rank0_ascend_pt"), "-bp", str(a / "rank0_ascend_pt"), "-o", str(msout)]
    pg, pg1, ms, why = [], [], [], []
    for i in range(max(runs, ms_runs)):
        if i < runs:  # as users run it (the timeline may be scanned in a second process), then in one process
            pg.append(run_unsampled(check, cwd=tmp, env=env)[:3])
            pg1.append(run_unsampled([*check, "--workers", "1"], cwd=tmp, env=env)[:3])
        if i < ms_runs:
            shutil.rmtree(msout, ignore_errors=True)
            ms.append(run_unsampled(ms_cmd, cwd=tmp, env=env)[:3])
            xlsx = sorted(msout.glob("performance_comparison_result_*.xlsx"))
            log = ms[-1][2].stdout + ms[-1][2].stderr
            if not (xlsx and xlsx[0].stat().st_size > 0 and "[ERROR]" not in log):
                why.append(f"rc {ms[-1][2].returncode}, xlsx {'written' if xlsx else 'MISSING'}, "
                           f"{[ln for ln in log.splitlines() if 'ERROR' in ln][:1]}")
    pg_ok = (out / "perfgate-result.json").is_file() and all(r[2].returncode in (0, 1) for r in pg + pg1)
    mem = "summed PSS of the process tree, untimed run sampled every 0.1 s (psutil)"
    peaks = [tree_pss_peak(c, cwd=tmp, env=env) for c in (check, [*check, "--workers", "1"], ms_cmd)] if pss else [None]
    if None in peaks:
        mem = "largest single process, ru_maxrss of the timed runs (wait4)"
        peaks = [med([r[1] for r in x]) for x in (pg, pg1, ms)]
    walls = [med([r[0] for r in x]) for x in (pg, pg1, ms)]
    print(f"   perfgate check: {', '.join(f'{r[0]:.2f}' for r in pg)} s wall, median {walls[0]:.2f} s, "
          f"{peaks[0]:,.0f} MiB; --workers 1: {', '.join(f'{r[0]:.2f}' for r in pg1)} s, median {walls[1]:.2f} s, "
          f"{peaks[1]:,.0f} MiB (result {'written' if pg_ok else 'MISSING'})", flush=True)
    print(f"   msprof-analyze {_msprof_version(exe)} compare: {', '.join(f'{r[0]:.2f}' for r in ms)} s wall, "
          f"median {walls[2]:.2f} s, {peaks[2]:,.0f} MiB (largest process {med([r[1] for r in ms]):,.0f} MiB)"
          + (f" -- REFERENCE FAILED: {why[0]}" if why else ""), flush=True)
    print(f"   peak memory: {mem}", flush=True)
    if why or not pg_ok:
        return None
    r = {"rows": rows, "pg_wall": walls[0], "pg_mib": peaks[0], "pg1_wall": walls[1], "pg1_mib": peaks[1],
         "ms_wall": walls[2], "ms_mib": peaks[2], "speed": walls[2] / walls[0], "lean": peaks[2] / peaks[0],
         "speed1": walls[2] / walls[1], "lean1": peaks[2] / peaks[1], "memory": mem, "version": _msprof_version(exe),
         "speed_rounds": [m[0] / p[0] for m, p in zip(ms, pg)] or [walls[2] / walls[0]]}
    print(f"   perfgate is {r['speed']:.1f}x faster and {r['lean']:.1f}x leaner "
          f"(--workers 1: {r['speed1']:.1f}x faster, {r['lean1']:.1f}x leaner)", flush=True)
    return r


#: the small real pair: the text level1 capture as baseline, the level2 capture (a second run of
#: the same job, 191 kernel rows in its step) as candidate
PAIR = (FIXTURES / "data/pytorch/text/level1", FIXTURES / "data/pytorch/text/level2")


def bench_pair(tmp: Path, runs: int = 5):
    """``perfgate check`` of the small real pair in fresh processes, ``runs`` times, un-sampled
    (:func:`run_unsampled`); the baseline is saved once beforehand. Exit 0 or 1 (a verdict) is a
    result; anything else stops the benchmark. Returns {"wall": median s, "walls": [...], ...}."""
    base, cand = PAIR
    if not (base.is_dir() and cand.is_dir()):
        print(f"6. small real pair: not found at {base.parent} (set PERFGATE_SHARED)", flush=True)
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    bl = tmp / "pair_bl"
    r = subprocess.run([sys.executable, "-m", "perfgate", "baseline", "save", "--name", "main", str(base),
                        "--baseline-dir", str(bl), "--force"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"perfgate baseline save (small pair) failed: {r.stderr[-800:]}")
    cmd = [sys.executable, "-m", "perfgate", "check", "--baseline", "main", str(cand), "--baseline-dir", str(bl),
           "--out", str(tmp / "pair_out"), "--quiet"]
    walls, cpus = [], []
    for _ in range(runs):
        w, _, r, c = run_unsampled(cmd, cwd=tmp, env=env)
        if r.returncode not in (0, 1):
            raise SystemExit(f"perfgate check (small pair) exited {r.returncode}: {r.stderr[-800:]}")
        walls.append(w)
        cpus.append(c)
    ranks = len(kernel_files(cand))
    rows = _rows_per_step(kernel_files(cand)[0].parent.parent)
    print(f"6. perfgate check, small real pair (level1 baseline, level2 candidate: {ranks} ranks x {rows} rows), {runs} fresh "
          f"processes: {', '.join(f'{w:.2f}' for w in walls)} s wall, median {med(walls):.2f} s (goal: < 1.0 s); "
          f"CPU {', '.join(f'{c:.2f}' for c in cpus)} s, median {med(cpus):.2f} s", flush=True)
    return {"wall": med(walls), "walls": walls, "cpu": med(cpus), "cpus": cpus, "runs": runs, "rows": rows,
            "ranks": ranks}


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


BUDGETS = Path(__file__).resolve().parent / "budgets.json"
TRACE_KEYS = {"shape a, most events kept": "most_kept", "real level1 events repeated, few kept": "real"}


def measures(res: dict) -> dict:
    """The figures ``--check`` holds to budgets: name -> (median, its rounds, "lower" or
    "higher" is better). Names: ``ratio_wall.<shape>`` (fingerprint wall / floor wall, one rank),
    ``rank_cpu_ms.synthetic`` / ``rank_cpu_ms.real`` (ms CPU per rank at the largest count),
    ``trace_mibs.most_kept`` / ``trace_mibs.real`` (byte-level extractor, MiB/s CPU),
    ``pair_wall_s`` / ``pair_cpu_s`` (small real pair, wall / CPU s of the fresh process), ``ref_speed`` / ``ref_lean`` (msprof-analyze wall / check
    wall, its peak memory / check's)."""
    out = {}
    for r in res["shapes"]:
        out[f"ratio_wall.{r['shape'][0]}"] = (r["ratio_wall"], r["ratio_wall_rounds"], "lower")
    for key, rs in (("synthetic", res["ranks"]), ("real", res["real_ranks"])):
        if rs:
            out[f"rank_cpu_ms.{key}"] = (rs[-1]["cpu_ms"], rs[-1]["cpu_ms_rounds"], "lower")
    for what, t in (res["trace"] or {}).items():
        out[f"trace_mibs.{TRACE_KEYS[what]}"] = (t["bytes_mibs_cpu"], t["bytes_rounds"], "higher")
    if res["pair"]:
        out["pair_wall_s"] = (res["pair"]["wall"], res["pair"]["walls"], "lower")
        out["pair_cpu_s"] = (res["pair"]["cpu"], res["pair"]["cpus"], "lower")
    if res["ref"]:
        out["ref_speed"] = (res["ref"]["speed"], res["ref"]["speed_rounds"], "higher")
        out["ref_lean"] = (res["ref"]["lean"], [res["ref"]["lean"]], "higher")   # one memory run: the floor
    return out


def check_budgets(found: dict, budgets: dict, profile: str) -> bool:
    """Print one line per budget of ``profile`` (``quick`` or ``full``): measured, budget,
    tolerance, pass / FAIL. The tolerance is the machine's noise on that figure in this run, the
    spread of its rounds (:func:`_spread`), never less than the file's ``noise_floor``; a
    lower-is-better figure fails above budget x (1 + tolerance), a higher-is-better one below
    budget / (1 + tolerance). A budgeted figure this run did not measure is listed, not failed.
    Returns True when none failed."""
    floor = float(budgets.get("noise_floor", 0.1))
    ok = True
    print(f"\nBUDGETS ({BUDGETS.name}, {profile}; tolerance = spread of the rounds, at least {floor:.0%})")
    print(f"   {'figure':24s} {'measured':>10s} {'budget':>10s} {'tolerance':>10s} {'rounds':>7s}  verdict")
    for name, b in budgets[profile].items():
        if name not in found:
            print(f"   {name:24s} {'-':>10s} {b['budget']:>10.3g} {'':>10s} {'':>7s}  not measured in this run")
            continue
        value, rounds, better = found[name]
        tol = max(floor, _spread(rounds))
        limit = b["budget"] * (1 + tol) if better == "lower" else b["budget"] / (1 + tol)
        good = value <= limit if better == "lower" else value >= limit
        ok &= good
        print(f"   {name:24s} {value:>10.3g} {b['budget']:>10.3g} {tol:>9.0%} {len(rounds):>7d}  "
              f"{'pass' if good else 'FAIL'} ({'<=' if better == 'lower' else '>='} {limit:.3g}; {b['what']})")
    return ok


def _taken(load: float) -> dict:
    """When, at which commit (``+dirty``: the work tree differed from it) and at what load a figure
    was measured."""
    def git(*args):
        r = subprocess.run(["git", "-C", str(HERE), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    commit = git("rev-parse", "--short", "HEAD") or None
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "load": round(load, 2)}


def results_figures(res: dict, taken: dict) -> dict:
    """The figures of this run in the results file's form (``perf_table`` module docstring)."""
    out = {}
    if res["shapes"]:
        worst = max(res["shapes"], key=lambda r: r["ratio_wall"])
        out["fingerprint"] = {"rows": worst["rows"], "shape": worst["shape"][0],
                              "perfgate_wall": worst["perfgate_wall"], "floor_wall": worst["floor_wall"],
                              "ratio_cpu": worst["ratio_cpu"],
                              "shapes": {r["shape"][0]: r["ratio_wall"] for r in res["shapes"]}}
    if res["ref"]:
        out["ref"] = {k: v for k, v in res["ref"].items() if k != "speed_rounds"}
    if res["pair"]:
        out["pair"] = res["pair"]
    if res["ranks"]:
        out["ranks"] = {"counts": [r["ranks"] for r in res["ranks"]], "rank_rows": res["ranks"][0]["rows"]
                        // res["ranks"][0]["ranks"], "cpu_ms": [r["cpu_ms"] for r in res["ranks"]]}
    if res["real_ranks"]:
        r = res["real_ranks"][-1]
        out["real_ranks"] = {"ranks": r["ranks"], "rank_rows": r["rank_rows"], "cpu_ms": r["cpu_ms"],
                             "no_trace_cpu_ms": r["no_trace_cpu_ms"], "builder": r["builder"]}
    if res["trace"]:
        t = {TRACE_KEYS[k]: v["bytes_mibs_cpu"] for k, v in res["trace"].items()}
        out["trace"] = {"real_mibs": t["real"], "most_mibs": t["most_kept"]}
    return {k: {**v, "taken": taken} for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="a,b,c,d,r")
    ap.add_argument("--rows", type=int, default=1_000_000, help="kernel rows per rank for shapes a, b, c")
    ap.add_argument("--repeats", type=int, default=2, help="paired rounds per shape (3 at least with --check)")
    ap.add_argument("--growth", default="100000,300000,1000000,3000000", help="row counts ('' skips)")
    ap.add_argument("--growth-shape", default="a")
    ap.add_argument("--ranks", default="64,1024")
    ap.add_argument("--rank-rows", default="1000", help="kernel rows per rank of shape d; several, comma-separated")
    ap.add_argument("--real-ranks", default="64", help="rank counts of shape r (real level1 ranks)")
    ap.add_argument("--real-rank-steps", type=int, default=5,
                    help="steps per real rank (191 kernel rows each; 5: the 955-row ranks of the per-rank goal)")
    ap.add_argument("--rank-builder", choices=("scenarios", "perfgate"), default="scenarios",
                    help="who writes shape r's ranks: the shared tools/scenarios (never imports perfgate) or "
                         "perfgate.synth.replicate")
    ap.add_argument("--dask", default="1,2", help="shape d on a local dask cluster of these worker counts ('' skips)")
    ap.add_argument("--ref-rows", type=int, default=None, help="rows per side of the reference pair (default --rows)")
    ap.add_argument("--ref-runs", type=int, default=3, help="timed runs of msprof-analyze compare (median)")
    ap.add_argument("--no-pss", action="store_true",
                    help="no untimed PSS runs: peak memory from the timed runs' ru_maxrss (largest process)")
    ap.add_argument("--msprof-analyze", default=None, help="path to the msprof-analyze executable")
    ap.add_argument("--pair-runs", type=int, default=5, help="fresh `perfgate check` runs of the small real pair")
    ap.add_argument("--skip", default="", help="comma-separated: growth, trace, ref, pair")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test of the script)")
    ap.add_argument("--check", action="store_true",
                    help=f"hold the figures to {BUDGETS.name} ('quick' or 'full' budgets); exit 1 when one is "
                         f"exceeded by more than the noise")
    ap.add_argument("--results", default=None,
                    help="merge this run's figures into this file (default: benchmarks/results/last_full.json "
                         "for a run without --quick)")
    ap.add_argument("--no-results", action="store_true", help="write no results file")
    ap.add_argument("--write-readme", action="store_true",
                    help="only regenerate README.md's performance table from the results file, run nothing")
    a = ap.parse_args()
    import perf_table
    if a.write_readme:
        perf_table.write_readme(Path(a.results) if a.results else perf_table.RESULTS)
        return
    if a.quick:
        a.rows, a.growth, a.ranks, a.rank_rows, a.repeats, a.dask = 20_000, "10000,20000", "4,16", 200, 1, ""
        a.real_ranks, a.real_rank_steps = "16", 1
    rounds = 3 if a.check else 1
    a.repeats = max(a.repeats, rounds)
    shapes = [s.strip() for s in a.shapes.split(",") if s.strip()]
    skip = {s.strip().lower() for s in a.skip.split(",") if s.strip()}
    policy = load_policy()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    from perfgate.hostmem import arrow_jemalloc, defrag_mode, small_pages
    # as the CLI runs every command (the in-process timings are library calls); the floor's
    # pyarrow read runs in this process too, so it uses the same Arrow pool
    with small_pages() as off, arrow_jemalloc() as jem:
        import pyarrow as _pa
        print(f"perfgate scale benchmarks on {machine()}; THP defrag {defrag_mode()}, numpy huge-page hint "
              f"{'off (perfgate.hostmem)' if off else 'as numpy set it'}; Arrow pool "
              f"{_pa.default_memory_pool().backend_name}{' (perfgate.hostmem)' if jem else ''}", flush=True)
        res = _main(a, shapes, skip, policy, rounds)
    results = None if a.no_results else Path(a.results) if a.results else None if a.quick else perf_table.RESULTS
    if results:
        perf_table.merge(results_figures(res, _taken(load)), results)
        print(f"\nfigures merged into {results} (README's table: bench_scale.py --write-readme)")
    if a.check:
        budgets = json.loads(BUDGETS.read_text())
        if not check_budgets(measures(res), budgets, "quick" if a.quick else "full"):
            sys.exit(1)


def _main(a, shapes, skip, policy, rounds):
    res = {"shapes": [], "ranks": [], "real_ranks": [], "trace": None, "ref": None, "pair": None}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        res["shapes"] = bench_shapes(tmp, shapes, a.rows, policy, a.repeats)
        if "growth" not in skip and a.growth:
            bench_growth(tmp, a.growth_shape, [int(x) for x in a.growth.split(",")], policy)
        if "trace" not in skip and "a" in shapes:
            res["trace"] = bench_trace(tmp, a.rows, max(2, rounds))
        if "d" in shapes:
            for rank_rows in (int(x) for x in str(a.rank_rows).split(",") if x.strip()):
                res["ranks"] += bench_ranks(tmp, [int(x) for x in a.ranks.split(",")], rank_rows, policy,
                                            [int(x) for x in a.dask.split(",") if x.strip()] if a.dask else (),
                                            rounds)
        if "r" in shapes:
            res["real_ranks"] = bench_real_ranks(tmp, [int(x) for x in a.real_ranks.split(",")], policy,
                                                 a.real_rank_steps, rounds, a.rank_builder)
        if "ref" not in skip:
            res["ref"] = bench_ref(tmp, a.msprof_analyze, a.ref_rows or a.rows, policy, runs=3, ms_runs=a.ref_runs,
                                   pss=not a.no_pss)
        if "pair" not in skip:
            res["pair"] = bench_pair(tmp, a.pair_runs)
    summary(res["shapes"] + res["ranks"] + res["real_ranks"], res["trace"], res["ref"])
    return res


if __name__ == "__main__":
    main()
