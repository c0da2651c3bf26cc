"""kernel_details.csv and trace_view.json on one time base (self-check ``time_base``).

In one export every Overlap Analysis Computing / Communication event of the trace starts where a
kernel row starts (measured on every real capture holding both files: the 6 text ranks of
level0/1/2 and the DB export's level1 rank 0, all events within 1 ns of a row start). A kernel
table whose Start Time(us) column is shifted against the trace (another capture's table, an
edited file) used to pass every self-check (durations and busy unions do not move), and the
host − device figures such as ``step.tail_gap_us`` read the shift as a change. Now a median
offset beyond ``self_checks.time_base_abs_us`` (default 1 us) fails closed: exit 3 naming both
files, the offset and one example pair. Real captures are copied to tmp_path to be shifted."""
from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.app.gate import save_baseline
from perfgate.ingest import load_capture
from perfgate.metrics.selfcheck import time_base
from perfgate.store.baselines import BaselineStore
from perfgate.synth import mutate

OUT0 = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
KD0 = f"{OUT0}/kernel_details.csv"
TV0 = f"{OUT0}/trace_view.json"


def shift_starts(output_dir, us: float) -> None:
    """Add ``us`` to every Start Time(us) cell of kernel_details.csv (exact, format kept)."""
    path = output_dir / "kernel_details.csv"
    header, rows, crlf = mutate._read_csv(path)
    i = mutate._col(header, "start_us")
    add = int(round(us * 1000))
    for r in rows:
        r[i] = mutate._us_text(mutate._ns(r[i]) + add, r[i])
    mutate._write_csv(path, header, rows, crlf)


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args], env={}, catch_exceptions=False)
    return r.exit_code, r.output


def _shifted(copy_capture, us: float, name: str | None = None):
    cap = copy_capture("level1", name)
    shift_starts(cap / OUT0, us)
    return cap


def test_table_shifted_100ms_against_the_trace_is_exit_3_naming_both_files(copy_capture, tmp_path):
    """+100 ms on every start of real level1 rank 0 (inside the collection window): before, exit 0."""
    cap = _shifted(copy_capture, 100_000)
    code, out = run("fingerprint", cap, "--trace", "always", "-o", tmp_path / "fp.json")
    assert code == 3, out
    assert "self-check time_base failed on rank 0" in out
    assert (f"{KD0} and {TV0} are not on one time base (files from different captures?): the kernel starts lie "
            f"a median 100,000.000 us later than the {TV0} Overlap Analysis Computing / Communication events "
            f"they pair with (191 of 191 sampled events") in out
    assert (f"e.g. {KD0} data row 1 (trans_TransData_0 starts at 1736408883804643.212 us) and the Computing "
            f"event at 1736408883704643.212 us (duration 53.742 us)") in out
    doc = json.loads((tmp_path / "fp.json").read_text())
    tb = [c for c in doc["self_checks"] if c["name"] == "time_base"]
    assert [(c["status"], c["rank"], c["observed"], c["tolerance"]) for c in tb] == [("fail", 0, 100000.0, 1.0)]


def test_shift_earlier_is_refused_too(copy_capture, tmp_path):
    cap = _shifted(copy_capture, -2_500.5)
    code, out = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert code == 3, out
    assert "a median 2,500.500 us earlier than" in out


def test_check_against_a_baseline_of_the_original_is_invalid_not_an_improvement(copy_capture, tmp_path, policy):
    """The issue's reproduction: the original saved as baseline, the shifted copy checked: exit 3,
    nothing compared (step.tail_gap_us no longer reads as an improvement)."""
    orig = copy_capture("level1", "orig")
    store = BaselineStore(tmp_path / "baselines")
    save_baseline(orig, "main", policy=policy, store=store)
    cap = _shifted(copy_capture, 100_000)
    code, out = run("check", cap, "--baseline", "main", "--baseline-dir", tmp_path / "baselines",
                    "--trace", "always", "--out", tmp_path / "out")
    assert code == 3, out
    assert "not on one time base" in out
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert not result.get("comparisons")


def test_without_reading_the_trace_nothing_is_judged(copy_capture, tmp_path):
    cap = _shifted(copy_capture, 100_000)
    code, out = run("fingerprint", cap, "--trace", "never", "-o", tmp_path / "fp.json")
    assert code == 0, out


@pytest.mark.parametrize("us", [0.5, -0.999])
def test_shift_below_the_tolerance_passes(copy_capture, tmp_path, us):
    cap = _shifted(copy_capture, us)
    code, out = run("fingerprint", cap, "--trace", "always", "-o", tmp_path / "fp.json")
    assert code == 0, out
    doc = json.loads((tmp_path / "fp.json").read_text())
    assert not [c for c in doc["self_checks"] if c["name"] == "time_base"]


def test_tolerance_is_the_policy_setting(copy_capture, tmp_path):
    """self_checks.time_base_abs_us: the same 0.5 us shift fails under 0.1 us."""
    cap = _shifted(copy_capture, 0.5)
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\nself_checks:\n  time_base_abs_us: 0.1\n")
    code, out = run("fingerprint", cap, "--policy", pol, "-o", tmp_path / "fp.json")
    assert code == 3, out
    assert "a median 0.500 us later than" in out and "tolerance 0.100 us" in out


def test_every_real_rank_with_both_files_is_on_one_time_base(ascend):
    """Every real rank holding a kernel table and Overlap Analysis (text level0/1/2, DB level1):
    offset 0, so the check says nothing; the check does judge them (a 1.5 us shift fails)."""
    base = ascend / "msinsight" / "test" / "data" / "pytorch"
    judged = 0
    for cap in [base / "text" / lvl for lvl in ("level0", "level1", "level2")] + [base / "db" / "level1"]:
        for r in load_capture(cap).ranks:
            if r.trace is None or not r.trace.has_overlap:
                continue
            assert time_base(r, 1.0) is None, (cap, r.rank)
            df = r.kernels.df
            moved = df.assign(start_ns=df["start_ns"] + 1500, end_ns=df["end_ns"] + 1500)
            bad = time_base(dataclasses.replace(r, kernels=dataclasses.replace(r.kernels, df=moved)), 1.0)
            assert bad is not None and bad.observed == 1.5, (cap, r.rank)
            judged += 1
    assert judged == 7


def test_trace_shifted_instead_of_the_table_is_refused_too(copy_capture, tmp_path):
    """The whole trace_view.json of rank 0 (host windows and device events) 100 ms later: the host
    windows still overlap the table's tasks, so nothing else tells the clocks apart."""
    from decimal import Decimal
    cap = copy_capture("level1")
    tv = cap / TV0
    ev = json.loads(tv.read_text())
    for e in ev:
        if e.get("ph") != "M" and "ts" in e:
            e["ts"] = f"{Decimal(str(e['ts'])) + 100_000:.3f}"
    tv.write_text(json.dumps(ev))
    code, out = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert code == 3, out
    assert "a median 100,000.000 us earlier than" in out


def test_a_whole_trace_on_another_clock_keeps_the_time_bases_warning(copy_capture, tmp_path):
    """Case Q02's sibling: rank 0's table 3 h later than its trace, no collection window to bound
    it (profiler_info without start_info / end_info). The host windows no longer overlap the
    device tasks: the time-bases warning, host − device figures left out, durations still judged
    (tests/ingest/test_validity_independent.py holds the figures); time_base does not fail it."""
    cap = copy_capture("level1")
    shift_starts(cap / OUT0, 3 * 3600e6)
    info = cap / "rank0_ascend_pt" / "profiler_info_0.json"
    d = json.loads(info.read_text())
    d.pop("start_info"), d.pop("end_info")
    info.write_text(json.dumps(d))
    code, out = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert code == 0, out
    fp = json.loads((tmp_path / "fp.json").read_text())
    assert [w for w in fp["warnings"] if w.startswith("rank 0:") and "different time bases" in w]
    assert not [c for c in fp["self_checks"] if c["name"] == "time_base"]
