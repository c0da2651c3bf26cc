#!/usr/bin/env python3
"""Cost of the validity model (issue 16) on a 1M-row rank, A/B paired.

A = fingerprint with every validity check (time values bounded by the window, Device_id read
and checked, host/device time base, lost host launches in the trace); B = the same with those
checks switched off (functions replaced by no-ops, Device_id not read). Runs alternate A, B,
A, B ... on one synthetic rank (perfgate.synth.scale, plus a Device_id column as torch_npu 2.5+
writes it), so machine load hits both sides alike; the per-pair ratio (A − B) / B and the
checks' own time measured inside A (wrapped calls) are printed. No timed assertions.

Usage: python3 benchmarks/bench_validity.py [--rows N] [--trace-mb M] [--pairs P]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from perfgate.ingest import kernels as kmod  # noqa: E402
from perfgate.ingest import validity  # noqa: E402
from perfgate.policy import load_policy  # noqa: E402
from perfgate.app.run import fingerprint_path  # noqa: E402
from perfgate.synth.scale import write_scaled  # noqa: E402
from perfgate.terms import TraceMode  # noqa: E402

CHECKS = ("check_time_values", "host_clock_mismatch", "lost_launches")


def add_device_column(csv_path: Path) -> None:
    """Prepend ``Device_id`` (value 0) to every line (kernel rows are one line each)."""
    tmp = csv_path.with_suffix(".tmp")
    with open(csv_path, encoding="utf-8") as src, open(tmp, "w", encoding="utf-8") as dst:
        dst.write("Device_id," + src.readline())
        for line in src:
            dst.write("0," + line)
    tmp.replace(csv_path)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--trace-mb", type=float, default=64)
    ap.add_argument("--pairs", type=int, default=4)
    a = ap.parse_args(argv)
    policy = load_policy()
    with tempfile.TemporaryDirectory() as tmp:
        cap = write_scaled(Path(tmp) / "c", ranks=1, steps=10, kernels_per_step=a.rows // 10, trace_mb=a.trace_mb)
        kd = next(cap.rglob("kernel_details.csv"))
        add_device_column(kd)
        real = {n: getattr(validity, n) for n in CHECKS}
        spent = {n: 0.0 for n in CHECKS}

        def timed(n):
            def f(*args, **kw):
                t = time.perf_counter()
                try:
                    return real[n](*args, **kw)
                finally:
                    spent[n] += time.perf_counter() - t
            return f

        cols = kmod._VALUE_COLUMNS

        def run(on: bool) -> float:
            for n in CHECKS:
                setattr(validity, n, timed(n) if on else (lambda *x, **k: {} if n == "lost_launches" else None))
            kmod._VALUE_COLUMNS = cols if on else tuple(c for c in cols if c != "device_id")
            t = time.perf_counter()
            fingerprint_path(cap, policy, with_trace=TraceMode.READ, workers=1)
            return time.perf_counter() - t

        run(True)  # warm-up (page cache, imports)
        for n in CHECKS:
            spent[n] = 0.0
        pairs = []
        for i in range(a.pairs):
            ta, tb = (run(True), run(False)) if i % 2 == 0 else tuple(reversed((run(False), run(True))))
            pairs.append((ta, tb))
        for n, f in real.items():
            setattr(validity, n, f)
        kmod._VALUE_COLUMNS = cols
    ratios = [(ta - tb) / tb for ta, tb in pairs]
    med_a = statistics.median(ta for ta, _ in pairs)
    print(f"rows {a.rows:,}, trace {a.trace_mb:g} MiB, {a.pairs} A/B pairs (alternating order)")
    for ta, tb in pairs:
        print(f"  A (checks on) {ta:7.2f} s   B (off) {tb:7.2f} s   (A-B)/B {100 * (ta - tb) / tb:+6.2f} %")
    print(f"median paired overhead: {100 * statistics.median(ratios):+.2f} %")
    inside = {n: v / a.pairs for n, v in spent.items()}
    print("checks' own time per fingerprint (wrapped, inside A): " + ", ".join(
        f"{n} {v * 1000:.1f} ms" for n, v in inside.items())
          + f"; total {100 * sum(inside.values()) / med_a:.2f} % of A's median {med_a:.2f} s")


if __name__ == "__main__":
    main()
