#!/usr/bin/env python3
"""Scale benchmarks for perfgate (issue: large captures, many ranks, bounded memory).

Prints ratios measured in this run, on this machine (no timed assertions):

A. ingest + fingerprint of one rank's N-row kernel_details.csv vs two floors: a raw pyarrow
   read of the same file's needed columns as strings (the string floor, the goal's reference)
   and pyarrow's own typed read of those columns (types inferred, default options);
B. peak RSS and throughput streaming a trace_view.json of M MiB (in a child process);
C. 1 / 8 / 64 ranks: wall time vs 1 rank, in this process, with the process pool and with dask;
D. msprof-analyze `compare` (the official tool, from PyPI) vs `perfgate check` on the same
   capture pair, where msprof-analyze is installed (``--msprof-analyze PATH`` or on PATH).

Usage: python3 benchmarks/bench_scale.py [--quick] [--rows N] [--trace-mb M] [--msprof-analyze PATH]
"""
from __future__ import annotations

import argparse
import csv
import os
import platform
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

from perfgate.gate import save_baseline  # noqa: E402
from perfgate.run import fingerprint_path  # noqa: E402
from perfgate.policy import load_policy  # noqa: E402
from perfgate.store.baselines import BaselineStore  # noqa: E402
from perfgate.ingest.kernels import _PMU_TIME as PMU_TIME  # noqa: E402
from perfgate.synth.scale import write_scaled  # noqa: E402

NEEDED = ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Stream ID",
          "Wait Time(us)"]


def best(fn, n=3):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def machine():
    mem = "?"
    try:
        mem = f"{int(open('/proc/meminfo').read().split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return (f"{platform.machine()}, {os.cpu_count()} cores, {mem}, Python {platform.python_version()}, "
            f"pyarrow {pa.__version__}")


def _timed(fn):
    """(wall s, CPU s of this process incl. Arrow's threads) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def bench_ingest(tmp: Path, rows: int, policy, repeats: int = 3):
    steps = 10
    cap = write_scaled(tmp / "a", ranks=1, steps=steps, kernels_per_step=max(1, rows // steps - 2))
    kd = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"

    # The floor reads what perfgate parses: the 8 kernel columns, plus the PipeUtilization
    # ratio / pipe-time columns when the policy's operator view reads them (default: yes).
    header = next(csv.reader(kd.open()))
    pmu = [h for h in header if h.endswith("_ratio") or PMU_TIME.match(h)] if policy.operators.read_pmu else []
    needed = NEEDED + pmu

    def raw():
        pacsv.read_csv(kd, convert_options=pacsv.ConvertOptions(
            include_columns=needed, column_types={c: pa.string() for c in needed}))

    def typed():
        # second floor: pyarrow's own typed read of the same columns (types inferred, default
        # options): what parsing them into numbers costs pyarrow itself
        pacsv.read_csv(kd, convert_options=pacsv.ConvertOptions(include_columns=needed))

    def ours():
        fingerprint_path(cap, policy, workers=1, with_trace=False)
    raw(), typed(), ours()  # warm the page cache and imports
    size = kd.stat().st_size / 2**20
    print(f"A. one rank, {rows:,} kernel rows ({size:,.0f} MiB kernel_details.csv); {repeats} rounds, raw and "
          f"perfgate interleaved; wall and CPU seconds (CPU: less sensitive to other load on a shared machine)")
    ratios_w, ratios_c, typed_w, typed_c = [], [], [], []
    for i in range(repeats):
        rw, rc = _timed(raw)
        tw, tc = _timed(typed)
        ow, oc = _timed(ours)
        ratios_w.append(ow / rw)
        ratios_c.append(oc / rc)
        typed_w.append(ow / tw)
        typed_c.append(oc / tc)
        print(f"   round {i + 1}: string floor (pyarrow read of the {len(needed)} parsed columns as strings, "
              f"{len(NEEDED)} + {len(pmu)} PMU) {rw:5.2f} s wall {rc:5.2f} s CPU"
              f" | typed floor (same columns, pyarrow-inferred types) {tw:5.2f} s wall {tc:5.2f} s CPU"
              f" | perfgate ingest + fingerprint (no trace) {ow:5.2f} s wall {oc:5.2f} s CPU")
        print(f"            perfgate vs string floor {ow / rw:4.2f}x wall {oc / rc:4.2f}x CPU"
              f" | vs typed floor {ow / tw:4.2f}x wall {oc / tc:4.2f}x CPU")

    def med(v):
        return f"median {sorted(v)[len(v) // 2]:.2f}x (spread {min(v):.2f}-{max(v):.2f})"
    print(f"   ratio vs the string floor (goal <= 2x): wall {med(ratios_w)}, CPU {med(ratios_c)}")
    print(f"   ratio vs the typed floor (pyarrow's own typed read):   wall {med(typed_w)}, CPU {med(typed_c)}")
    tv = (cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json").stat().st_size / 2**20
    full, _ = _timed(lambda: fingerprint_path(cap, policy, workers=1, with_trace=True))
    print(f"   ... including its {tv:,.0f} MiB trace_view.json (about 2 Overlap Analysis events per kernel): {full:7.2f} s")
    return cap


# The child resets its high-water mark first: a forked child otherwise inherits the parent's
# peak RSS (section A leaves the parent at ~1 GiB), which is not what the reader uses.
_CHILD = """
import sys, time
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
sys.path.insert(0, {root!r})
from perfgate.ingest.trace import read_trace
t = time.perf_counter()
tr = read_trace({path!r}, full_parse={full})
dt = time.perf_counter() - t
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(dt, tr.n_events, len(tr.overlap), hwm)
"""


def bench_trace(tmp: Path, mb: float):
    cap = write_scaled(tmp / "t", ranks=1, steps=5, kernels_per_step=20000, trace_mb=mb)
    tv = cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    size = tv.stat().st_size / 2**20
    res = {}
    for label, full in (("selective scan (default)", False), ("every event parsed (ijson, full_parse=True)", True)):
        out = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(HERE), path=str(tv), full=full)],
                             capture_output=True, text=True, check=True).stdout.split()
        res[label] = (float(out[0]), int(out[1]), int(out[2]), int(out[3]))
    events, kept = next(iter(res.values()))[1:3]
    print(f"B. streaming a {size:,.0f} MiB trace_view.json ({events:,} events, {kept:,} Overlap Analysis events kept)")
    for label, (dt, _, _, rss_kb) in res.items():
        print(f"   {label:45s} {dt:7.1f} s, {size / dt:6.1f} MiB/s, peak RSS {rss_kb / 1024:,.0f} MiB (goal < 1024 MiB)")
    tv.unlink()


def bench_ranks(tmp: Path, per_rank: int, policy, rank_counts=(1, 8, 64)):
    print(f"C. ranks x {per_rank:,} kernel rows each: wall time (ratio to 1 rank, same mode)")
    base = {}
    cluster = client = None
    try:
        from distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    except Exception as e:  # noqa: BLE001
        print(f"   dask unavailable: {e}")
    for n in rank_counts:
        cap = write_scaled(tmp / f"r{n}", ranks=n, steps=4, kernels_per_step=max(1, per_rank // 4 - 2))
        row = []
        modes = [("serial", dict(workers=1)), ("pool", dict(workers=os.cpu_count() or 1))]
        if client is not None:
            modes.append(("dask", dict(scheduler=cluster.scheduler_address)))
        for mode, kw in modes:
            t = best(lambda: fingerprint_path(cap, policy, **kw), n=1)
            base.setdefault(mode, t if n == 1 else None)
            row.append(f"{mode} {t:6.2f} s ({t / base[mode]:5.1f}x)")
        print(f"   {n:3d} rank(s): " + "   ".join(row))
        shutil.rmtree(cap)
    if client is not None:
        client.close()
        cluster.close()


def bench_msprof(tmp: Path, exe: str | None, policy, big_rows: int):
    exe = exe or shutil.which("msprof-analyze")
    if not exe:
        print("D. msprof-analyze not found (pip install msprof-analyze into a venv and pass --msprof-analyze PATH)")
        return
    print("D. msprof-analyze compare vs perfgate check on the same pair (one rank, wall time and peak RSS)")
    real = HERE.parent / "shared/fixtures/ascend/msinsight/test/data/pytorch/text"
    pairs = []
    if real.is_dir():
        pairs.append(("real level1 -> level2 rank0", real / "level1/rank0_ascend_pt", real / "level2/rank0_ascend_pt"))
    a = write_scaled(tmp / "ma", ranks=1, steps=4, kernels_per_step=big_rows // 4 - 2, run=1)
    b = write_scaled(tmp / "mb", ranks=1, steps=4, kernels_per_step=big_rows // 4 - 2, run=2)
    pairs.append((f"synthetic {big_rows:,} rows", a / "rank0_ascend_pt", b / "rank0_ascend_pt"))
    for label, base, cand in pairs:
        def timed(cmd):
            t = time.perf_counter()
            # this checkout first on the path: the child runs in tmp, where an uninstalled
            # perfgate would not import (and a failed import must not be timed as a run)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE),
                                                                            os.environ.get("PYTHONPATH")])))
            r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, cwd=tmp, env=env)
            dt = time.perf_counter() - t
            rss = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "?"
            return dt, rss, r.returncode, r.stderr
        bl = tmp / "bl"
        save_baseline(base, "b", policy=policy, store=BaselineStore(bl), env={}, force=True)
        out = tmp / "pgout"
        shutil.rmtree(out, ignore_errors=True)
        pg = timed([sys.executable, "-m", "perfgate", "check", "--baseline", "b", str(cand), "--baseline-dir",
                    str(bl), "--out", str(out), "--quiet", "--workers", "1", "--trace", "always"])
        if not (out / "perfgate-result.json").is_file():  # rc 1 is a verdict only when the result was written
            print(f"   {label:30s} perfgate check did not run (rc {pg[2]}): {pg[3].strip().splitlines()[-2:]}")
            continue
        ms = timed([exe, "compare", "-d", str(cand), "-bp", str(base), "-o", str(tmp / "msout")])
        print(f"   {label:30s} msprof-analyze {ms[0]:7.2f} s {int(ms[1]) / 1024 if ms[1].isdigit() else 0:7,.0f} MiB "
              f"(rc {ms[2]}) | perfgate {pg[0]:6.2f} s {int(pg[1]) / 1024 if pg[1].isdigit() else 0:6,.0f} MiB "
              f"(rc {pg[2]}) | ratio {ms[0] / pg[0]:5.1f}x faster")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test of the script)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--trace-mb", type=float, default=2048)
    ap.add_argument("--rows-per-rank", type=int, default=20_000)
    ap.add_argument("--msprof-analyze", default=None, help="path to the msprof-analyze executable")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: A,B,C,D")
    a = ap.parse_args()
    if a.quick:
        a.rows, a.trace_mb, a.rows_per_rank = 50_000, 16, 2_000
    skip = set(a.skip.upper().split(",")) if a.skip else set()
    policy = load_policy()
    print(f"perfgate scale benchmarks on {machine()}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "A" not in skip:
            bench_ingest(tmp, a.rows, policy)
        if "B" not in skip:
            bench_trace(tmp, a.trace_mb)
        if "C" not in skip:
            bench_ranks(tmp, a.rows_per_rank, policy, (1, 8) if a.quick else (1, 8, 64))
        if "D" not in skip:
            bench_msprof(tmp, a.msprof_analyze, policy, a.rows if not a.quick else 20_000)


if __name__ == "__main__":
    main()
