"""perfgate.synth.replicate: real rank rows replicated over many steps with fresh exact times
(the benchmark's real-shaped captures)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.csv as pacsv

from perfgate.policy import load_policy
from perfgate.app.run import fingerprint_path
from perfgate.synth.replicate import replicate_rank


def _strings(path):
    import csv
    with open(path, newline="", encoding="utf-8-sig") as f:
        header = next(csv.reader(f))
    return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types={h: pa.string() for h in header}))


def test_replicated_real_rows_keep_every_row_and_shift_times_exactly(tmp_path, text_captures):
    src = text_captures / "level1/rank0_ascend_pt"
    cap = replicate_rank(src, tmp_path / "r", steps=4, first_step=7)
    a = _strings(src / "ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    b = _strings(cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    n = a.num_rows
    assert b.num_rows == 4 * n
    assert b.column("Step Id").to_pylist() == [str(s) for s in (7, 8, 9, 10) for _ in range(n)]
    for c in ("Name", "Type", "Duration(us)", "Input Shapes", "aiv_vec_ratio"):
        assert b.column(c).to_pylist() == a.column(c).to_pylist() * 4

    def ns(t):
        t = t.strip()
        w, _, f = t.partition(".")
        return int(w) * 1000 + int((f + "000")[:3])
    sa = [ns(x) for x in a.column("Start Time(us)").to_pylist()]
    sb = [ns(x) for x in b.column("Start Time(us)").to_pylist()]
    shift = sb[n] - sa[0]
    assert shift > max(sa) - min(sa)  # steps do not overlap
    assert sb == [x + k * shift for k in range(4) for x in sa]  # exact integer-ns shift of every row
    assert b.column("Start Time(us)")[0].as_py().endswith("\t")  # the Excel TAB guard kept


def test_replicated_capture_passes_the_self_checks_of_its_source(tmp_path, text_captures):
    policy = load_policy()
    src = fingerprint_path(text_captures / "level1/rank0_ascend_pt", policy, workers=1)
    fp = fingerprint_path(replicate_rank(text_captures / "level1/rank0_ascend_pt", tmp_path / "r", steps=3),
                          policy, workers=1)
    assert [c for c in fp.self_checks if c.status == "fail"] == []
    passed = {c.name for c in fp.self_checks if c.status == "pass"}
    assert passed == {c.name for c in src.self_checks if c.status == "pass"}
    assert passed >= {"comm_equality", "compute_union", "overlap_gap", "trace_vs_step_trace"}
    per_step = [c for c in fp.self_checks if c.name == "compute_union"]
    assert sorted(c.step for c in per_step) == ["1", "2", "3"]
    assert fp.config["steps_per_rank"] == {"0": 3}


def test_replicated_times_stay_inside_the_collection_window(tmp_path, text_captures):
    """Many steps, a second run and a second rank move the times far past the source's window:
    profiler_info's window moves and grows with them (the benchmark's 1M-row shapes failed
    the issue-16 window check before)."""
    from perfgate.ingest.validity import collection_window
    src = text_captures / "level1/rank0_ascend_pt"
    cap = replicate_rank(src, tmp_path / "r", steps=40, ranks=2, run=1, trace=False)
    for r in (0, 1):
        lo, hi = collection_window(cap / f"rank{r}_ascend_pt" / f"profiler_info_{r}.json")
        t = pacsv.read_csv(cap / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
                           convert_options=pacsv.ConvertOptions(column_types={"Start Time(us)": pa.float64()}))
        starts = t.column("Start Time(us)").to_numpy() * 1000
        assert lo <= starts.min() and starts.max() <= hi
        s_lo, s_hi = collection_window(src / "profiler_info_0.json")
        assert hi - lo > 5 * (s_hi - s_lo)  # 40 steps: far wider than the source's window
    fp = fingerprint_path(cap, load_policy(), workers=1, with_trace=False)
    assert fp.config["steps_per_rank"] == {"0": 40, "1": 40}
