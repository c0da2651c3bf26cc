"""A baseline and a candidate collected with different profiler collection options (with_stack,
record_shapes, profile_memory, activities, schedule, ...) get a note at the top of every report
naming the option, both values and what it affects, as a profiler-level change does; the
metrics are still judged. Real G2025 level1 captures copied to tmp_path, their
profiler_info_<N>.json edited in the copy (level1 is collected with with_stack true)."""
from __future__ import annotations

import json

from click.testing import CliRunner

from perfgate.cli import main
from perfgate.metrics.collection import collection_notes

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
    assert collection_notes({}, _config()) == [] and collection_notes({}, {}) == []
