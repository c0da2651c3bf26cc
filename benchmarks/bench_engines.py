#!/usr/bin/env python3
"""What an engine change would buy (issue 21): the measurements behind its "fused engine" question.

Three probes on one rank of ``--rows`` kernel rows (shape a of bench_scale.py: the real level1
rank-0 rows replicated with fresh times), each printing figures measured in this run (no timed
assertions):

1. **Threads.** ``fingerprint_path`` as users run it (the structure stage in a second thread,
   ``perfgate.metrics.fingerprint.structure_beside``) against the same with the family view moved
   into that thread too, the two threads' work then about equal: paired rounds (A B B A ...),
   the per-pair wall ratio. A ratio near 1 says the work after the read is held by the GIL, so
   more threads cannot shorten it.
2. **A dataframe engine per stage.** The per-step core of the step table (rows, first start, last
   end, busy union, ΣDuration, communication ΣDuration per step; the busy union as in
   ``perfgate.metrics.intervals``) as one polars query, against perfgate's numpy ``step_table``
   (which computes more columns), with the busy unions and row counts checked equal.
3. **Import cost.** ``import pandas`` / ``import polars`` in fresh processes (``-X importtime``
   totals), what a small capture's ``check`` would pay.

polars is not a perfgate dependency: probes 2 and 3 run only where it is importable
(``pip install polars``) and say so otherwise.

Usage: python3 benchmarks/bench_engines.py [--rows 1000000] [--rounds 6]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "benchmarks"))

import numpy as np  # noqa: E402

import bench_scale  # noqa: E402
import perfgate.metrics.fingerprint as F  # noqa: E402
from perfgate.policy import load_policy  # noqa: E402
from perfgate.app.run import fingerprint_path  # noqa: E402


def _view_beside_run(self, kernels, rank_id, policy, root):
    """``_StructureBeside._run`` with the family view computed in the thread as well (cat, view,
    segments; errors are not the subject here)."""
    try:
        cat = (F.km.categorize(kernels.df, policy.categories)
               if kernels.type_available and kernels.core_available else None)
        self._put(cat=cat)
        self._put(view=F._family_view(kernels, policy, root, cat))
        self._put(segments=F._segment_summary_of(kernels, rank_id, policy, root, cat))
    except Exception as e:  # noqa: BLE001
        self._put(error=e, stage="cat")
    finally:
        with self._cond:
            self._done = True
            self._cond.notify_all()


def probe_threads(cap: Path, policy, rounds: int) -> None:
    as_is = (F._StructureBeside._run, F._StructureBeside.STAGES)
    moved = (_view_beside_run, ("cat", "view", "segments"))

    def run(variant):
        F._StructureBeside._run, F._StructureBeside.STAGES = variant
        t = time.perf_counter()
        fingerprint_path(cap, policy, with_trace=False)
        return time.perf_counter() - t
    try:
        run(as_is), run(moved)   # warm
        a, b = [], []
        for i in range(rounds):
            for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                (a if which == 0 else b).append(run(as_is if which == 0 else moved))
    finally:
        F._StructureBeside._run, F._StructureBeside.STAGES = as_is
    print(f"1. threads: as shipped {statistics.median(a):.2f} s, family view moved into the structure thread "
          f"{statistics.median(b):.2f} s wall (medians of {rounds}); per-pair ratio "
          f"{statistics.median([y / x for x, y in zip(a, b)]):.3f}", flush=True)


def probe_polars_steps(cap: Path, rounds: int) -> None:
    try:
        import polars as pl
    except ImportError:
        print("2. polars per-step core: skipped (polars not importable; pip install polars)")
        return
    from perfgate.ingest.kernels import read_kernels
    from perfgate.metrics.steps import step_table
    kt = read_kernels(next(cap.rglob("kernel_details.csv")))
    k = kt.df

    class Rank:   # what step_table reads of a RankCapture
        kernels, trace, step_trace, rank, host_clock_ok = kt, None, None, 0, True
    df = pl.DataFrame({"step": k["step"].cat.codes.to_numpy().astype(np.int32), "s": k["start_ns"].to_numpy(),
                       "e": k["end_ns"].to_numpy(), "d": k["dur_ns"].to_numpy(), "c": k["is_comm"].to_numpy()})

    def with_polars():
        return (df.lazy().filter(pl.col("step") >= 0).sort(["step", "s"])
                .with_columns(reach=pl.col("e").cum_max().over("step"))
                .with_columns(prev=pl.col("reach").shift(1).over("step"))
                .with_columns(add=(pl.col("e") - pl.max_horizontal("s", pl.col("prev").fill_null(pl.col("s"))))
                              .clip(0))
                .group_by("step").agg(n=pl.len(), first=pl.col("s").first(), last=pl.col("e").max(),
                                      busy=pl.col("add").sum(), ksum=pl.col("d").sum(),
                                      comm=pl.col("d").filter(pl.col("c")).sum())
                .sort("step").collect())

    def with_numpy():
        return step_table(Rank)
    ours, theirs = with_numpy(), with_polars()
    labels = np.asarray(k["step"].cat.categories.astype(str))[theirs["step"].to_numpy()]
    busy = dict(zip(ours["step"], ours["busy_us"]))
    rows = dict(zip(ours["step"], ours["kernels"]))
    if not (all(abs(busy[s] - v / 1000) < 1e-6 for s, v in zip(labels, theirs["busy"].to_list()))
            and all(rows[s] == v for s, v in zip(labels, theirs["n"].to_list()))):
        raise SystemExit("2. polars per-step core: busy unions or row counts differ from step_table")
    out = {}
    for name, fn in (("numpy step_table", with_numpy), ("polars query", with_polars)):
        w, c = [], []
        for _ in range(rounds):
            t, p = time.perf_counter(), time.process_time()
            fn()
            w.append(time.perf_counter() - t)
            c.append(time.process_time() - p)
        out[name] = (statistics.median(w), statistics.median(c))
    print(f"2. per-step core of {len(theirs):,} steps (busy unions and counts equal): "
          + "; ".join(f"{n} {w * 1000:.0f} ms wall {c * 1000:.0f} ms CPU" for n, (w, c) in out.items())
          + " (step_table computes 20 columns, the query 6)", flush=True)


def probe_imports(rounds: int) -> None:
    for mod in ("pandas", "polars"):
        totals = []
        for _ in range(rounds):
            r = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {mod}"], capture_output=True,
                               text=True)
            if r.returncode:
                print(f"3. import {mod}: not importable")
                break
            totals.append(int(r.stderr.strip().splitlines()[-1].split("|")[1]) / 1e6)
        else:
            print(f"3. import {mod} in a fresh process: {statistics.median(totals):.3f} s (median of {rounds})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args(argv)
    policy = load_policy()
    with tempfile.TemporaryDirectory(prefix="perfgate-engines-") as tmp:
        cap = bench_scale.build("a", Path(tmp) / "a", a.rows)
        print(f"{bench_scale.machine()}; shape a, {a.rows:,} rows", flush=True)
        probe_threads(cap, policy, a.rounds)
        probe_polars_steps(cap, a.rounds)
    probe_imports(a.rounds)


if __name__ == "__main__":
    main()
