"""Several profiler_info files in one rank folder (perfgate.ingest.discover.one_profiler_info).

The profiler writes one file per rank folder: ``profiler_info_<N>.json`` or, single-card,
``profiler_info.json`` (SCHEMAS.md §0). Before, discovery read the first numbered file and
ignored the others silently: a rank folder holding profiler_info_0.json and profiler_info_7.json
was rank 0, whatever the kernel table beside them belonged to. Now files claiming different
ranks are exit 3 naming each file and its rank (one rank folder per rank); files claiming one
rank with different contents are exit 3 naming the first differing field; identical copies are
read once with a warning. Real level1 is copied to tmp_path to be altered."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.discover import discover

R0 = "rank0_ascend_pt"


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args], env={}, catch_exceptions=False)
    return r.exit_code, r.output


def _info(cap, name="profiler_info_0.json"):
    return json.loads((cap / R0 / name).read_text())


def test_two_profiler_info_naming_different_ranks_is_exit_3_naming_both(copy_capture, tmp_path):
    """The issue's reproduction: a copy of profiler_info_0.json as profiler_info_7.json (rank_id 7)."""
    cap = copy_capture("level1")
    doc = _info(cap)
    doc["rank_id"] = 7
    (cap / R0 / "profiler_info_7.json").write_text(json.dumps(doc))
    code, out = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert code == 3, out
    assert (f"{R0}: 2 profiler_info files name different ranks (profiler_info_0.json: rank 0, "
            f"profiler_info_7.json: rank 7): the rank of ASCEND_PROFILER_OUTPUT/ beside them") in out
    assert "one rank folder per rank" in out


def test_numbered_file_beside_a_rankless_single_card_file_is_ambiguous(copy_capture):
    """profiler_info.json (a single-card run: rank_id -1) beside profiler_info_0.json."""
    cap = copy_capture("level1")
    doc = _info(cap)
    doc["rank_id"] = -1
    (cap / R0 / "profiler_info.json").write_text(json.dumps(doc))
    with pytest.raises(InvalidCaptureError, match=r"name different ranks \(profiler_info.json: no rank, "
                                                  r"profiler_info_0.json: rank 0\)"):
        discover(cap)


def test_same_rank_different_run_is_refused_naming_the_field(copy_capture, tmp_path):
    """profiler_info.json with rank_id 0 but another collection end: two runs' files for rank 0."""
    cap = copy_capture("level1")
    doc = _info(cap)
    doc["end_info"]["collectionTimeEnd"] += 5_000_000_000
    (cap / R0 / "profiler_info.json").write_text(json.dumps(doc))
    code, out = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert code == 3, out
    assert ("2 profiler_info files (profiler_info.json, profiler_info_0.json) both say rank 0 but differ in "
            "end_info.collectionTimeEnd") in out


def test_identical_copy_is_read_once_with_a_warning(copy_capture, tmp_path):
    """A stray byte-for-byte copy: same rank, same facts whichever is read -> exit 0, the numbered
    file read, a warning naming both; the figures equal those of the untouched capture."""
    cap = copy_capture("level1")
    shutil.copy(cap / R0 / "profiler_info_0.json", cap / R0 / "profiler_info_0 (1).json")
    code, out = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert code == 0, out
    fp = json.loads((tmp_path / "fp.json").read_text())
    assert ("rank 0: 2 identical profiler_info files in rank0_ascend_pt/ (profiler_info_0 (1).json, "
            "profiler_info_0.json): profiler_info_0.json read (the profiler writes one per rank folder; remove "
            "the copy)") in fp["warnings"]
    loc = discover(cap)[0]
    assert loc.info_path.name == "profiler_info_0.json" and loc.rank_source == "file name profiler_info_0.json"
    clean = copy_capture("level1", "clean")
    code, out = run("fingerprint", clean, "-o", tmp_path / "fp0.json")
    assert code == 0, out
    assert json.loads((tmp_path / "fp0.json").read_text())["metrics"] == fp["metrics"]


def test_reformatted_copy_counts_as_identical(copy_capture):
    """Equal JSON content written with other whitespace is the same file's facts."""
    cap = copy_capture("level1")
    (cap / R0 / "profiler_info.json").write_text(json.dumps(_info(cap)))
    assert len(discover(cap)[0].warnings) == 1


def test_unreadable_second_file_is_named(copy_capture):
    cap = copy_capture("level1")
    (cap / R0 / "profiler_info_0 (1).json").write_text("{not json")
    with pytest.raises(InvalidCaptureError, match="invalid JSON") as e:
        discover(cap)
    assert str(e.value.path).endswith("profiler_info_0 (1).json")


def test_every_real_rank_folder_holds_one_profiler_info(ascend):
    """No real fixture rank folder is affected: each holds one profiler_info file, no warning."""
    seen = 0
    for out in sorted(ascend.rglob("ASCEND_PROFILER_OUTPUT")):
        infos = sorted(out.parent.glob("profiler_info*.json"))
        if infos:
            assert len(infos) == 1, infos
            seen += 1
    assert seen == 16
    base = ascend / "msinsight" / "test" / "data" / "pytorch"
    for cap in [base / k / lvl for k in ("text", "db") for lvl in ("level0", "level1", "level2")] + \
            [ascend / "msinsight" / "test" / "st" / "level2"]:
        assert all(loc.warnings == () for loc in discover(cap)), cap
