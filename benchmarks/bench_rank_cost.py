#!/usr/bin/env python3
"""Per-rank fixed cost on real-shaped ranks: CPU per rank of a serial fingerprint.

64 copies of the real level1 rank 0 (perfgate.synth.replicate: 955 kernel rows over 5 steps,
its communication.json and trace_view.json, each copy with its own rank id) are written to a
temporary folder; ``fingerprint_path(..., workers=1)`` runs one warm round, then ``--rounds``
timed rounds. Prints the CPU time (``time.process_time``) per rank of each round and their
median (goal: <= 50 ms; docs/performance.md, "Per-rank fixed cost on real-shaped ranks"). The
machine's load moves the figure by several ms: compare two trees by alternating runs, e.g.
``PYTHONPATH=A python3 bench_rank_cost.py`` then ``PYTHONPATH=B ...``, several times each.
No timed assertions.

Usage: python3 benchmarks/bench_rank_cost.py [--ranks N] [--rounds R] [--trace never|read]
       [--profile FILE]   (cProfile of the timed rounds, for ``pstats``)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(HERE))

from perfgate.app.run import fingerprint_path  # noqa: E402
from perfgate.policy import load_policy  # noqa: E402
from perfgate.synth.replicate import replicate_rank  # noqa: E402
from perfgate.terms import TraceMode  # noqa: E402

#: the shared data folder, resolved as tests/conftest.py does: $PERFGATE_SHARED (set and not empty),
#: else the repository's sibling folder ../shared
SHARED = Path(os.environ.get("PERFGATE_SHARED") or HERE.parent / "shared")
LEVEL1 = SHARED / "fixtures" / "ascend" / "msinsight" / "test" / "data" / "pytorch" / "text" / "level1" / "rank0_ascend_pt"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trace", choices=("read", "never"), default="read")
    ap.add_argument("--src", type=Path, default=LEVEL1, help="the real rank folder replicated")
    ap.add_argument("--profile", type=Path, help="write a cProfile of the timed rounds here")
    a = ap.parse_args()
    if not a.src.is_dir():
        print(f"no real rank at {a.src} (give --src)", file=sys.stderr)
        return 2
    import perfgate
    mode = TraceMode.NEVER if a.trace == "never" else TraceMode.READ
    policy = load_policy()
    with tempfile.TemporaryDirectory() as tmp:
        cap = replicate_rank(a.src, Path(tmp) / "cap", steps=5, ranks=a.ranks)
        fingerprint_path(cap, policy, workers=1, with_trace=mode)   # warm: imports, memos
        prof = None
        if a.profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        per = []
        for _ in range(a.rounds):
            c = time.process_time()
            fingerprint_path(cap, policy, workers=1, with_trace=mode)
            per.append((time.process_time() - c) / a.ranks * 1000.0)
        if prof is not None:
            prof.disable()
            prof.dump_stats(str(a.profile))
    load = os.getloadavg()[0]
    print(f"perfgate {Path(perfgate.__file__).parent}; {a.ranks} ranks, --trace {a.trace}, load {load:.1f}")
    print(f"ms CPU per rank: median {statistics.median(per):.1f} ({' '.join(f'{x:.1f}' for x in per)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
