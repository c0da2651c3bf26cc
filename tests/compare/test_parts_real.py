"""Parts of the step on a real capture: level1 with every Conv2D kernel made 30 % faster,
consistently in kernel_details.csv, trace_view.json (device events and the Overlap Analysis) and
step_trace_time.csv. The check passes, the Conv2D parts alone move (×0.7 of their own time, the
device scale ×1.00), every other family keeps its time, and the self-checks still pass (the
mutation is consistent)."""
import json
import shutil
from decimal import Decimal

import pytest

from perfgate import terms
from perfgate.app.gate import check, save_baseline
from perfgate.ingest.aliases import OVERLAP_PROCESS
from perfgate.store.baselines import BaselineStore
from perfgate.synth.mutate import _col, _ns, _read_csv, _write_csv

from _edits import restate_op_statistic

pytestmark = pytest.mark.real


def _ts(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def speed_up_type(output_dir, op_type: str, factor: float) -> float:
    """Shorten every kernel of Type ``op_type`` to ``factor`` of its duration on this rank (start
    kept): kernel_details.csv, its device event in trace_view.json, the Overlap Analysis (the
    Computing event split, the freed time Free or Communication(Not Overlapped)) and
    step_trace_time.csv. Returns the freed time in us."""
    kd = output_dir / "kernel_details.csv"
    h, rows, crlf = _read_csv(kd)
    it, iname, istart, idur = h.index("Type"), _col(h, "name"), _col(h, "start_us"), _col(h, "dur_us")
    tp = output_dir / "trace_view.json"
    ev = json.loads(tp.read_text(encoding="utf-8"))
    pid = {e["args"]["name"]: e["pid"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    ov, hw = pid[OVERLAP_PROCESS], pid["Ascend Hardware"]

    def span(e):
        s = _ns(str(e["ts"]))
        return s, s + int(round(Decimal(str(e["dur"])) * 1000))

    comm = [span(e) for e in ev if e.get("pid") == ov and e.get("ph") == "X" and e.get("name") == "Communication"]
    freed_free = freed_comm = 0
    for row in rows:
        if row[it].strip() != op_type:
            continue
        s, d = _ns(row[istart]), _ns(row[idur])
        nd = int(round(d * factor))
        row[idur] = f"{nd / 1000:.3f}"
        a, b = s + nd, s + d
        for e in ev:
            if e.get("pid") == hw and e.get("ph") == "X" and e.get("name") == row[iname] and _ns(str(e["ts"])) == s:
                e["dur"] = nd / 1000
        comp = next(e for e in ev if e.get("pid") == ov and e.get("ph") == "X" and e.get("name") == "Computing"
                    and span(e)[0] <= a and b <= span(e)[1])
        c0, c1 = span(comp)
        comp["dur"] = (a - c0) / 1000
        if b < c1:
            ev.append(dict(comp, ts=_ts(b), dur=(c1 - b) / 1000))
        in_comm = any(x <= a and b <= y for x, y in comm)
        ev.append(dict(comp, name="Communication(Not Overlapped)" if in_comm else "Free", ts=_ts(a),
                       dur=(b - a) / 1000))
        if in_comm:
            freed_comm += b - a
        else:
            freed_free += b - a
    _write_csv(kd, h, rows, crlf)
    restate_op_statistic(output_dir)
    tp.write_text(json.dumps(ev), encoding="utf-8")
    st = output_dir / "step_trace_time.csv"
    h, srows, scrlf = _read_csv(st)
    for sr in srows:   # one step in this capture
        sr[h.index("Computing")] = repr(float(sr[h.index("Computing")]) - (freed_free + freed_comm) / 1000)
        sr[h.index("Free")] = repr(float(sr[h.index("Free")]) + freed_free / 1000)
        for col in ("Communication(Not Overlapped)", "Communication(Not Overlapped and Exclude Receive)"):
            if col in h:
                sr[h.index(col)] = repr(float(sr[h.index(col)]) + freed_comm / 1000)
        sr[h.index("Overlapped")] = repr(float(sr[h.index("Overlapped")]) - freed_comm / 1000)
    _write_csv(st, h, srows, scrlf)
    return (freed_free + freed_comm) / 1000


def test_real_conv2d_faster_is_that_family_only(text_captures, tmp_path, policy):
    cand = tmp_path / "level1_conv_fast"
    shutil.copytree(text_captures / "level1", cand)
    freed = [speed_up_type(p / "ASCEND_PROFILER_OUTPUT", "Conv2D", 0.7) for p in sorted(cand.glob("rank*_ascend_pt"))]
    assert all(f > 100 for f in freed)
    store = BaselineStore(tmp_path / "bl")
    save_baseline(text_captures / "level1", "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    assert r.status == terms.PASS and r.exit_code == 0, [c.reason for c in r.comparisons if c.fails]
    assert not [c for c in r.self_checks if c.status == "fail"]
    rel = {c.labels["family"]: c.stats["part"]["cand_us"] / c.stats["part"]["base_us"] / c.stats["part"]["scale"]
           for c in r.comparisons if c.name == "share.family" and c.labels.get("view") == "rank0"
           and "part" in c.stats and c.stats["part"]["base_us"] > 0}
    conv = {f: v for f, v in rel.items() if f.startswith("Conv2D") and "Backprop" not in f}
    assert conv and all(v == pytest.approx(0.7, abs=0.01) for v in conv.values()), conv
    others = {f: v for f, v in rel.items() if f not in conv}
    assert others and all(v == pytest.approx(1.0, abs=0.01) for v in others.values()), others
    assert not [c for c in r.comparisons if c.gated and c.verdict == terms.REGRESSION]
