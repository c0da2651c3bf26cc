"""`perfgate compare BASE CAND`: two capture folders judged through check's judging path, with
the verdict, exit codes and reports of `check`, and nothing written to a baseline store or a
history database."""
import json
import os

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, mutate, write_capture

OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
FAMILY = "aclnnMuls_MulAiCore_Mul"


def run(tmp_path, *args):
    """The CLI run from ``tmp_path`` with the default store and history locations there."""
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = CliRunner().invoke(main, list(map(str, args)), env={"PERFGATE_BASELINE_DIR": str(tmp_path / "bl"),
                                                                "PERFGATE_HISTORY": str(tmp_path / "h.sqlite")},
                               catch_exceptions=False)
    finally:
        os.chdir(here)
    return r.exit_code, r.output


def _nothing_stored(tmp_path):
    for p in (tmp_path / "bl", tmp_path / "h.sqlite", tmp_path / "baselines", tmp_path / "perfgate-history.sqlite"):
        assert not p.exists(), p


def test_two_real_captures_pass_with_every_report_and_no_store(tmp_path, copy_capture):
    base, cand = copy_capture("level1", "base"), copy_capture("level1", "cand")
    code, out = run(tmp_path, "compare", base, cand, "--out", tmp_path / "o")
    assert code == 0 and out.startswith("perfgate: PASS (exit 0)"), out
    for f in ("perfgate-junit.xml", "perfgate-report.md", "perfgate-result.json"):
        assert (tmp_path / "o" / f).is_file()
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert doc["verdict"] == "PASS" and "status" not in doc and doc["exit_code"] == 0
    assert doc["counts"]["gated"]["total"] > 300 and doc["baseline_name"] == str(base)
    assert any("nothing was written to a baseline store" in n for n in doc["notes"])
    _nothing_stored(tmp_path)


def test_a_doubled_family_is_a_regression_as_check_reports_it(tmp_path, copy_capture):
    base, cand = copy_capture("level1", "base"), copy_capture("level1", "cand")
    mutate.add_calls(cand / OUT, FAMILY, factor=2)
    code, out = run(tmp_path, "compare", base, cand, "--junit", tmp_path / "j.xml", "--markdown", tmp_path / "r.md",
                    "--json", tmp_path / "r.json", "--out", tmp_path / "o")
    first = out.splitlines()[0]
    assert code == 1 and first.startswith("perfgate: REGRESSION") and "(exit 1)" in first and FAMILY in out, out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "REGRESSION" and doc["counts"]["gated_regressions"] >= 1
    assert FAMILY in (tmp_path / "r.md").read_text() and "failure" in (tmp_path / "j.xml").read_text()
    _nothing_stored(tmp_path)

    # check against a stored baseline of the same base reaches the same verdict and counts
    assert run(tmp_path, "baseline", "save", "--name", "main", base)[0] == 0
    code2, _ = run(tmp_path, "check", "--baseline", "main", cand, "--json", tmp_path / "c.json", "--out", tmp_path / "c")
    via_check = json.loads((tmp_path / "c.json").read_text())
    assert code2 == code and via_check["verdict"] == doc["verdict"] and via_check["counts"] == doc["counts"]


def test_repeated_captures_on_either_side(tmp_path):
    caps = [write_capture(tmp_path / f"run{i}", SynthSpec(seed=i)) for i in range(1, 5)]
    code, out = run(tmp_path, "compare", "--base", caps[0], "--base", caps[1], caps[2], caps[3], "--json", "-",
                    "--out", tmp_path / "o")
    doc = json.loads(out[:out.rindex("}") + 1])
    assert code == 0 and doc["verdict"] in ("PASS", "UNSURE"), out
    assert doc["baseline_name"] == f"{caps[0]} (+1 more)"
    stats = [c["stats"] for c in doc["comparisons"] if c.get("stats")]
    assert stats, "several runs per side: step metrics are judged statistically"
    _nothing_stored(tmp_path)


@pytest.mark.parametrize("args", [(), ("one",), ("a", "b", "c")])
def test_compare_without_two_sides_is_a_usage_error(tmp_path, args):
    code, out = run(tmp_path, "compare", *args)
    assert code == 2, out


def test_an_invalid_base_is_exit_3_naming_it(tmp_path, copy_capture):
    base, cand = copy_capture("level1", "base"), copy_capture("level1", "cand")
    mutate.header_only(base / OUT / "kernel_details.csv")
    code, out = run(tmp_path, "compare", base, cand, "--out", tmp_path / "o")
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert code == 3 and doc["verdict"] == "INVALID_CAPTURE" and str(base) in doc["error"]["path"], out
    _nothing_stored(tmp_path)
