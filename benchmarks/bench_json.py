#!/usr/bin/env python3
"""trace_view.json: perfgate's byte-level extractor against general JSON parsers, same traces.

Every reader extracts what the gate keeps of a trace (see :mod:`perfgate.ingest.tracebytes`):
the event count, the X events named Computing / Communication / Communication(Not Overlapped) /
Free (pid, kind, ts, dur), the ``ProfilerStep#N`` windows, the ``process_name`` metadata, and
the host -> device flow starts / ends (``cat`` async_npu / HostToDevice, ``ph`` s / f). Each
reader runs in its own child process; the figures are that process's CPU time (user + system)
and its peak RSS (``VmHWM``; also less the RSS after the reader's imports), the file in the
page cache (one untimed read first).

Readers:
  tracebytes  perfgate.ingest.trace.read_trace (the byte-level extractor, exact ns from the digits)
  msgspec     mmap, cut into ~8 MiB runs of whole events (:func:`checked_runs`: correct for any
              valid file), each decoded by msgspec.json.Decoder into a Struct of the fields above
              (ts, dur and args kept raw; the kept events' ts / dur made exact ns by perfgate's
              Arrow converter, the process_name args decoded)
  orjson      the same runs, each orjson.loads into dicts
  ijson       ijson.items(f, "item") with the yajl2_c backend (every event a dict, Decimal numbers)
  simdjson    the same runs, each parsed by pysimdjson's Parser (lazy proxies, fields read per event)
orjson and simdjson cut runs at ``}, {`` / ``},{`` after each 8 MiB mark (right for these
traces, no retry) and read ts / dur as floats (not exact ns): their speed is an upper bound for
an exact reader built on them.

Traces: the real ones under $PERFGATE_SHARED/fixtures/ascend (every trace_view.json over 1 MB),
the real level1 rank-0 trace's events repeated to ``--mib`` MiB (default 500; few events kept,
every event kind of a real capture), and the level1 rank replicated over ``--kept-steps`` steps
by perfgate.synth.replicate (nearly every event kept); both built in a temporary folder.

Usage:
  python3 benchmarks/bench_json.py [--mib 500] [--kept-steps 5236] [--repeats 2] [--readers tracebytes,msgspec,...]
      [--python PATH]   # an interpreter with pysimdjson (e.g. a scratch venv) for the simdjson reader
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PERFGATE_SHARED") or HERE.parent / "shared")
LEVEL1 = SHARED / "fixtures/ascend/msinsight/test/data/pytorch/text/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
READERS = ("tracebytes", "msgspec", "orjson", "ijson", "simdjson")

_CHILD = r'''
import mmap, sys, time
sys.path.insert(0, ROOT)
KINDS = {"Computing", "Communication", "Communication(Not Overlapped)", "Free"}
CATS = ("async_npu", "HostToDevice")
CUT = 8 << 20


def runs(mm):
    """(lo, hi): runs of whole events of the bare array in mm, ~CUT bytes each."""
    lo = mm.find(b"{")
    end = mm.rfind(b"}") + 1
    while lo < end:
        hi = mm.find(b"}, {", lo + CUT)
        if hi < 0:
            hi2 = mm.find(b"},{", lo + CUT)
            hi = end - 1 if hi2 < 0 else hi2
        else:
            hi2 = mm.find(b"},{", lo + CUT, hi)
            hi = hi2 if hi2 >= 0 else hi
        yield lo, hi + 1
        release(mm, lo, hi + 1)
        lo = mm.find(b"{", hi + 1)
        if lo < 0:
            break


def release(mm, lo, hi):
    """The mapped pages of bytes lo..hi leave this process's RSS (they stay in the page cache):
    a reader's memory is then its own, not the file's."""
    lo -= lo % mmap.PAGESIZE
    hi -= hi % mmap.PAGESIZE
    if hi > lo:
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


class Kept:
    def __init__(self):
        self.n = 0
        self.overlap = []
        self.steps = []
        self.procs = {}
        self.starts = {}
        self.ended = set()

    def take(self, name, ph, pid, ts, dur, cat, fid, pname):
        if ph == "X" and name in KINDS:
            self.overlap.append((pid, name, ts, dur))
        elif name.startswith("ProfilerStep#"):
            self.steps.append((name, ts, dur))
        elif ph == "M" and name == "process_name":
            self.procs[pid] = pname()
        if cat in CATS and fid is not None:
            if ph == "s":
                self.starts[(cat, str(fid))] = ts
            elif ph == "f":
                self.ended.add((cat, str(fid)))

    def result(self):
        return self.n, len(self.overlap), len(self.steps), len(self.procs), len(self.starts), len(self.ended)


def tracebytes(path):
    from perfgate.ingest import trace as T
    tr = T.read_trace(path)
    starts, ended = tr.flows
    return tr.n_events, len(tr.overlap), len(tr.steps), len(tr.processes), len(starts), len(ended)


SEP = None


def checked_runs(mm, decode):
    """Runs of whole events, each decoded by ``decode`` (a bytes -> list callable that raises
    on invalid JSON), cut at a ``}``, comma, ``{`` (whitespace between) after each CUT mark.
    Correct for any valid file: a run starts at an event and a cut inside a string or a nested
    value leaves that run's last string or bracket open, so its decode fails; the run is then
    extended to the next cut and decoded again."""
    import re
    global SEP
    SEP = SEP or re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
    lo, end = mm.find(b"[") + 1, mm.rfind(b"]")
    while lo < end:
        at = lo + CUT
        while True:
            m = SEP.search(mm, at) if at < end else None
            hi, nxt = (m.start() + 1, m.end() - 1) if m else (end, end)
            try:
                got = decode(b"[" + mm[lo:hi] + b"]")
            except ValueError:
                if m is None:
                    raise
                at = m.end()
                continue
            yield got
            break
        release(mm, lo, nxt)
        lo = nxt


def exact_ns(raw: list):
    """JSON texts of plain decimal µs (a number, or a string holding one) -> exact int64 ns
    (round half up at 1 ns), vectorised by perfgate's own converter (Arrow compute kernels,
    as the Arrow line scan uses)."""
    import pyarrow as pa
    from perfgate.ingest.csvread import exact_scaled_arrow
    texts = pa.array([bytes(r).strip(b'"') for r in raw], type=pa.binary()).cast(pa.string())
    return exact_scaled_arrow(texts, 1000, path=PATH, column="ts")[0]


def msgspec_reader(path):
    import msgspec

    class Ev(msgspec.Struct, gc=False):
        name: str = ""
        ph: str = ""
        pid: int | str = 0
        ts: msgspec.Raw = msgspec.Raw(b"0")
        dur: msgspec.Raw = msgspec.Raw(b"0")
        cat: str = ""
        id: int | str | None = None
        args: msgspec.Raw = msgspec.Raw(b"{}")

    class Args(msgspec.Struct):
        name: str = ""

    dec = msgspec.json.Decoder(list[Ev])
    adec = msgspec.json.Decoder(Args)
    k = Kept()
    take = k.take
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for evs in checked_runs(mm, dec.decode):
            k.n += len(evs)
            n0, s0 = len(k.overlap), len(k.steps)
            for e in evs:
                take(e.name, e.ph, e.pid, e.ts, e.dur, e.cat, e.id, lambda e=e: adec.decode(e.args).name)
            # a Raw holds its run's bytes alive: the kept ones become bytes
            k.overlap[n0:] = [(p, nm, bytes(t), bytes(d)) for p, nm, t, d in k.overlap[n0:]]
            k.steps[s0:] = [(nm, bytes(t), bytes(d)) for nm, t, d in k.steps[s0:]]
            k.starts.update([(key, bytes(v)) for key, v in k.starts.items() if type(v) is msgspec.Raw])
    ts = exact_ns([o[2] for o in k.overlap])             # the kept events' ts / dur: exact ns
    dur = exact_ns([o[3] for o in k.overlap])
    assert len(ts) == len(dur) == len(k.overlap)
    return k.result()


def orjson_reader(path):
    import orjson
    k = Kept()
    take = k.take
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for lo, hi in runs(mm):
            evs = orjson.loads(b"[" + mm[lo:hi] + b"]")
            k.n += len(evs)
            for e in evs:
                g = e.get
                take(g("name", ""), g("ph", ""), g("pid"), g("ts"), g("dur"), g("cat", ""), g("id"),
                     lambda e=e: e["args"]["name"])
    return k.result()


def ijson_reader(path):
    import ijson
    assert ijson.backend == "yajl2_c", ijson.backend
    k = Kept()
    take = k.take
    with open(path, "rb") as f:
        for e in ijson.items(f, "item", buf_size=1 << 16):
            k.n += 1
            g = e.get
            take(g("name", ""), g("ph", ""), g("pid"), g("ts"), g("dur"), g("cat", ""), g("id"),
                 lambda e=e: e["args"]["name"])
    return k.result()


def simdjson_reader(path):
    import simdjson
    k = Kept()
    take = k.take
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for lo, hi in runs(mm):
            doc = simdjson.Parser().parse(b"[" + mm[lo:hi] + b"]")   # a parser per run: the last one's proxies may live
            for e in doc:
                k.n += 1
                g = e.get
                take(g("name", ""), g("ph", ""), g("pid"), g("ts"), g("dur"), g("cat", ""), g("id"),
                     lambda e=e: e["args"]["name"])
            del doc
    return k.result()


READ = {"tracebytes": tracebytes, "msgspec": msgspec_reader, "orjson": orjson_reader,
        "ijson": ijson_reader, "simdjson": simdjson_reader}
PRELOAD = {"tracebytes": ["perfgate.ingest.trace"], "msgspec": ["msgspec", "perfgate.ingest.csvread"],
           "orjson": ["orjson"], "ijson": ["ijson"], "simdjson": ["simdjson"]}
for m in PRELOAD[MODE]:
    __import__(m)                    # imports are not timed (a gate run has them loaded)


def hwm():
    """This process's peak RSS in KiB (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))


base = hwm()
c, w = time.process_time(), time.perf_counter()
res = READ[MODE](PATH)
c, w = time.process_time() - c, time.perf_counter() - w
print(c, w, hwm(), base, *res)
'''


def _run(python: str, mode: str, path: Path, root: Path = HERE):
    code = f"ROOT = {str(root)!r}\nMODE = {mode!r}\nPATH = {str(path)!r}\n" + _CHILD
    p = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if p.returncode:
        return None, p.stderr.strip().splitlines()[-1]
    o = p.stdout.split()
    return (float(o[0]), float(o[1]), int(o[2]) / 1024, tuple(int(x) for x in o[4:]), int(o[3]) / 1024), None


def _repeated(out: Path, mib: float) -> Path:
    """The real level1 rank-0 trace's events repeated to about ``mib`` MiB."""
    body = (LEVEL1 / "trace_view.json").read_bytes().strip()[1:-1].strip()
    p = out / "trace_view.json"
    with open(p, "wb") as f:
        f.write(b"[" + body)
        for _ in range(max(0, round(mib * 2**20 / len(body)) - 1)):
            f.write(b", " + body)
        f.write(b"]")
    return p


def _most_kept(out: Path, steps: int) -> Path:
    """The real level1 rank replicated over ``steps`` steps by perfgate.synth.replicate: its
    trace holds only the events the gate keeps (nearly every event kept, no flow)."""
    sys.path.insert(0, str(HERE))
    from perfgate.synth.replicate import replicate_rank
    cap = replicate_rank(LEVEL1.parent, out / "kept", steps=steps, trace=True)
    return next(cap.rglob("trace_view.json"))


def _median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=float, default=500)
    ap.add_argument("--repeats", type=int, default=2, help="paired rounds (every reader once per round)")
    ap.add_argument("--readers", default=",".join(READERS))
    ap.add_argument("--python", default=sys.executable, help="interpreter for the child processes")
    ap.add_argument("--kept-steps", type=int, default=5236,
                    help="steps of the most-kept trace (the level1 rank replicated; 0 skips); 5236: ~190 MiB")
    ap.add_argument("--real", default="1", help="0: skip the real traces under fixtures/ascend")
    ap.add_argument("--root", default=str(HERE), help="the perfgate source tree the tracebytes reader imports")
    a = ap.parse_args()
    readers = [r for r in a.readers.split(",") if r]
    tmp = Path(tempfile.mkdtemp(prefix="bench_json_"))
    try:
        files = []
        if a.real != "0":
            files += [(str(p.relative_to(SHARED)), p) for p in sorted((SHARED / "fixtures/ascend").rglob("trace_view.json"))
                      if p.stat().st_size > 1 << 20]
        if a.mib > 0:
            files.append((f"real level1 events repeated to {a.mib:.0f} MiB", _repeated(tmp, a.mib)))
        if a.kept_steps > 0:
            files.append((f"level1 rank replicated over {a.kept_steps} steps (most events kept)",
                          _most_kept(tmp, a.kept_steps)))
        table = []
        for what, path in files:
            mib = path.stat().st_size / 2**20
            with open(path, "rb") as f:                       # into the page cache (not into this process's RSS)
                while f.read(64 << 20):
                    pass
            res, err = {}, {}
            for _ in range(a.repeats):
                for r in readers:
                    got, e = _run(a.python, r, path, Path(a.root))
                    if got is None:
                        err[r] = e
                    else:
                        res.setdefault(r, []).append(got)
            print(f"{what} ({mib:,.1f} MiB)", flush=True)
            ref = res.get("tracebytes", [[None] * 4])[0][3]
            for r in readers:
                if r in err and r not in res:
                    print(f"   {r:11s} failed: {err[r]}")
                    continue
                cpu, rss = _median([x[0] for x in res[r]]), max(x[2] for x in res[r])
                own = max(x[2] - x[4] for x in res[r])          # above the process's RSS after its imports
                fields = res[r][0][3]
                same = "" if ref is None or fields == ref else f"  (extracted {fields} != tracebytes {ref})"
                print(f"   {r:11s} {mib / cpu:8.1f} MiB/s CPU  {cpu:7.2f} s  peak RSS {rss:7.0f} MiB ({own:+6.0f} MiB over imports){same}", flush=True)
                table.append({"trace": what, "mib": mib, "reader": r, "mibs_cpu": mib / cpu, "peak_rss_mib": rss, "rss_over_imports_mib": own,
                              "fields": fields})
        print(json.dumps(table))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
