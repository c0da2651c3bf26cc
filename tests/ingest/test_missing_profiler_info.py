"""A torch_npu rank folder without its profiler_info_<N>.json: the rank still comes from the
folder name, and the capture's warnings say so, naming the folder and what is then unknown
(profiler level, CANN version, collection window); the level of such a rank reads
"not recorded", never Python's None (exit 0 with only
"['Level2', 'None']" printed)."""
from __future__ import annotations

from click.testing import CliRunner

from perfgate.cli import main
from perfgate.ingest import discover
from perfgate.ingest.discover import mixed_levels_warning
from perfgate.app.run import fingerprint_path


def test_the_folder_without_profiler_info_is_named(copy_capture, policy):
    cap = copy_capture("level2")
    (cap / "rank0_ascend_pt" / "profiler_info_0.json").unlink()
    locs = discover(cap)
    r0 = next(loc for loc in locs if loc.rank == 0)
    assert r0.rank_source.startswith("folder name rank0_ascend_pt")
    assert any("rank0_ascend_pt has no profiler_info_<N>.json" in w for w in r0.warnings)
    assert not next(loc for loc in locs if loc.rank == 1).warnings
    fp = fingerprint_path(cap, policy, workers=1, with_trace="never")
    assert any("rank 0: rank0_ascend_pt has no profiler_info_<N>.json" in w and "collection window" in w
               for w in fp.warnings)
    assert "ranks were profiled at different levels: ['Level2', 'not recorded']" in fp.warnings
    assert not any("None" in w for w in fp.warnings)


def test_check_prints_it(copy_capture, tmp_path):
    base, cand = copy_capture("level1"), copy_capture("level2")
    (cand / "rank0_ascend_pt" / "profiler_info_0.json").unlink()
    r = CliRunner()
    assert r.invoke(main, ["baseline", "save", "--name", "m", "--baseline-dir", str(tmp_path / "b"),
                           str(base)]).exit_code == 0
    res = r.invoke(main, ["check", "--baseline", "m", "--baseline-dir", str(tmp_path / "b"), "--out",
                          str(tmp_path / "o"), str(cand)])
    assert res.exit_code == 0, res.output
    assert "rank0_ascend_pt has no profiler_info_<N>.json" in res.output


def test_one_level_no_warning():
    assert mixed_levels_warning({"Level1"}) is None and mixed_levels_warning(set()) is None
    assert mixed_levels_warning({None, "Level0"}) == "ranks were profiled at different levels: ['Level0', 'not recorded']"


def test_complete_captures_have_no_such_warning(text_captures, policy):
    fp = fingerprint_path(text_captures / "level1", policy, workers=1, with_trace="never")
    assert not any("profiler_info" in w for w in fp.warnings)


def test_a_config_value_not_recorded_is_said_so():
    from types import SimpleNamespace

    from perfgate.compare.rules import config_notes
    notes = config_notes(SimpleNamespace(config={"cann_version": None}, provenance={}),
                         SimpleNamespace(config={"cann_version": "8.3.RC1"}, provenance={}))
    assert "CANN version changed: baseline not recorded -> candidate 8.3.RC1" in notes
    assert not any("None" in n for n in notes)
