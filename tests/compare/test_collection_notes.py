"""A baseline and a candidate collected with different profiler collection options (with_stack,
record_shapes, profile_memory, activities, schedule, ...) get a note at the top of every report
naming the option, both values and what it affects, as a profiler-level change does; the
metrics are still judged. Real G2025 level1 captures copied to tmp_path, their
profiler_info_<N>.json edited in the copy (level1 is collected with with_stack true)."""
from __future__ import annotations

import json

from click.testing import CliRunner

from perfgate.cli import main
from perfgate.metrics.collection import collection_notes, collection_section

from _edits import edit_profiler_info as edit_info

NOTE = ("collection option with_stack changed: baseline false -> candidate true: the profiler records every "
        "operator's Python call stack: host-side overhead per operator, so host-bound and step-time figures are "
        "not like-for-like")


def cli(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={}, catch_exceptions=False)
    return r.exit_code, r.output


def _without_stack(copy_capture, name="base"):
    base = copy_capture("level1", name)
    edit_info(base, lambda d: d["config"]["common_config"].update(with_stack=False))
    return base


def test_check_of_a_with_stack_capture_against_a_baseline_without_it_says_so_first(copy_capture, tmp_path):
    base, cand = _without_stack(copy_capture), copy_capture("level1", "cand")
    bl, out = tmp_path / "bl", tmp_path / "o"
    code, text = cli("baseline", "save", "--name", "main", base, "--baseline-dir", bl, "--trace", "never")
    assert code == 0, text
    code, text = cli("check", "--baseline", "main", cand, "--baseline-dir", bl, "--out", out, "--trace", "never")
    assert code == 0, text    # still judged: the same kernels, the note says the figures are not like-for-like
    assert "! collection option with_stack changed: baseline false -> candidate true" in text
    md = (out / "perfgate-report.md").read_text()
    head = md.split("Gated metrics:")[0]
    assert "collection option with_stack changed: baseline false -&gt; candidate true" in head
    notes = json.loads((out / "perfgate-result.json").read_text())["notes"]
    assert any(n.startswith(NOTE) for n in notes)
    assert not any(n.startswith("collection option") and "with_stack" not in n for n in notes)


def test_compare_with_the_same_options_has_no_collection_note(copy_capture, tmp_path):
    base, cand = copy_capture("level1", "base"), copy_capture("level1", "cand")
    code, text = cli("compare", base, cand, "--out", tmp_path / "o", "--trace", "never")
    assert code == 0 and "collection option" not in text, text
    base = _without_stack(copy_capture, "base_without_stack")
    code, text = cli("compare", base, cand, "--out", tmp_path / "o2", "--trace", "never")
    assert "! collection option with_stack changed: baseline false -> candidate true" in text


def test_a_baseline_saved_before_the_options_were_read(copy_capture, tmp_path):
    """A baseline file without config.collection records no option: nothing is noted for a
    candidate at torch_npu's defaults, one note for a candidate collected with with_stack."""
    base, cand = copy_capture("level1", "base"), copy_capture("level1", "cand")
    bl = tmp_path / "bl"
    assert cli("baseline", "save", "--name", "main", base, "--baseline-dir", bl, "--trace", "never")[0] == 0
    doc = json.loads((bl / "main.json").read_text())
    doc["fingerprint"]["config"].pop("collection")
    (bl / "main.json").write_text(json.dumps(doc))
    code, text = cli("check", "--baseline", "main", cand, "--baseline-dir", bl, "--out", tmp_path / "o",
                     "--trace", "never")
    assert code == 0 and "! collection options not recorded in the baseline" in text, text
    md = (tmp_path / "o" / "perfgate-report.md").read_text().split("Gated metrics:")[0]
    assert "the candidate was collected with with_stack=true, record_shapes=true, profile_memory=true" in md


def _config(**options):
    opts = {"with_stack": False, "record_shapes": False, "profile_memory": False, "with_modules": False,
            "with_flops": False, "activities": "CPU,NPU", "l2_cache": False,
            "schedule": {"wait": 0, "warmup": 1, "active": 2, "repeat": 1, "skip_first": 5}}
    opts.update(options)
    return {"collection": {"options": opts, "ranks_differ": {}}}


def test_notes_name_each_changed_option_and_what_it_affects():
    notes = collection_notes(_config(), _config(profile_memory=True, activities="NPU",
                                                schedule={"wait": 0, "warmup": 1, "active": 5, "repeat": 1,
                                                          "skip_first": 5}))
    assert [n.split(":")[0] for n in notes] == ["collection option profile_memory changed",
                                                  "collection option activities changed",
                                                  "collection option schedule changed"]
    assert "every tensor allocation" in notes[0] and "baseline CPU,NPU -> candidate NPU" in notes[1]
    assert ("baseline wait=0 warmup=1 active=2 repeat=1 skip_first=5 -> candidate wait=0 warmup=1 active=5 "
            "repeat=1 skip_first=5: another part of the run is captured") in notes[2]
    # a baseline file stores the schedule's keys sorted: shown in the profiler's order all the same
    stored = _config(schedule={"active": 2, "repeat": 1, "skip_first": 5, "wait": 0, "warmup": 1})
    assert collection_notes(stored, _config()) == []
    assert "baseline wait=0 warmup=1 active=2 repeat=1 skip_first=5 -> candidate wait=0 warmup=1 active=3" in \
        collection_notes(stored, _config(schedule={"wait": 0, "warmup": 1, "active": 3, "repeat": 1,
                                                   "skip_first": 5}))[0]
    # not recorded on one side: noted only when the other side is away from torch_npu's defaults
    assert collection_notes(_config(with_stack=None), _config()) == []
    assert collection_notes(_config(with_stack=None), _config(with_stack=True))[0].startswith(
        "collection option with_stack changed: baseline not recorded -> candidate true")
    # a side without the section records nothing: judged by the same rule, so a recorded schedule is said
    assert collection_notes({}, _config(schedule=None)) == [] and collection_notes({}, {}) == []
    assert "the candidate was collected with schedule=wait=0 warmup=1" in collection_notes({}, _config())[0]


def _compare(copy_capture, tmp_path, change):
    """The collection notes of ``compare`` of a level1 copy edited by ``change`` (the baseline)
    against an unedited copy."""
    base, cand = copy_capture("level1", "base"), copy_capture("level1", "cand")
    edit_info(base, change)
    out = tmp_path / "o"
    code, text = cli("compare", base, cand, "--out", out, "--trace", "never")
    assert code == 0, text
    return [n for n in json.loads((out / "perfgate-result.json").read_text())["notes"] if "collection option" in n]


def test_a_schedule_written_as_text_and_activities_in_lower_case_are_no_change(copy_capture, tmp_path):
    def spelled(doc):
        common = doc["config"]["common_config"]
        common["schedule"] = {k: str(v) for k, v in common["schedule"].items()}
        common["activities"] = [a.rsplit(".", 1)[-1].lower() for a in reversed(common["activities"])]
    assert _compare(copy_capture, tmp_path, spelled) == []


def test_an_option_not_recorded_is_judged_by_one_rule_for_every_option():
    """Not recorded (the field missing or null, no common_config, no section) reads as torch_npu's
    default; the schedule has none, so a recorded schedule against none is a change."""
    recorded = {0: {"collection": {"with_stack": True, "activities": ["ProfilerActivity.NPU"],
                                   "schedule": {"wait": 0, "warmup": 1, "active": 1, "repeat": 1, "skip_first": 5}}}}
    cand = {"collection": collection_section(recorded)}
    for missing in ({0: {"collection": {}}}, {0: {"collection": {"with_stack": None, "activities": None}}}):
        notes = collection_notes({"collection": collection_section(missing)}, cand)
        assert [n.split(":")[0] for n in notes] == ["collection option with_stack changed",
                                                      "collection option activities changed",
                                                      "collection option schedule changed"]
        assert "baseline not recorded -> candidate wait=0 warmup=1 active=1 repeat=1 skip_first=5" in notes[2]
    assert "with_stack=true, activities=NPU, schedule=wait=0" in collection_notes({}, cand)[0]
    # at torch_npu's defaults, not recorded is no change: with_stack false, activities CPU and NPU
    defaults = collection_section({0: {"collection": {"with_stack": False, "activities": ["CPU", "NPU"]}}})
    assert collection_notes({"collection": collection_section({0: {}})}, {"collection": defaults}) == []


def test_a_profiler_info_without_common_config_is_noted_against_one_with_a_schedule(copy_capture, tmp_path):
    notes = _compare(copy_capture, tmp_path, lambda d: d["config"].pop("common_config"))
    changed = [n.split(":")[0] for n in notes]
    assert "collection option with_stack changed" in changed and "collection option schedule changed" in changed
    assert "collection option activities changed" not in changed     # the candidate's CPU,NPU is the default
