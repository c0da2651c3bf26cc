"""The profiler's collection options (profiler_info_<N>.json config.common_config /
experimental_config) are in the fingerprint's ``config.collection``: each option's value, None
where no rank records it (never read as false), and the options the ranks of one capture record
differently, with a warning. Read on real G2025 captures copied to tmp_path, their profiler_info
edited in the copy."""
from __future__ import annotations

import json

import pytest

from _cli import run
from _edits import edit_profiler_info as edit_info

from perfgate.app.run import fingerprint_path
from perfgate.compare.calibrate import refuse_mixed
from perfgate.errors import UsageError
from perfgate.ingest import load_capture
from perfgate.ingest.discover import read_profiler_info
from perfgate.metrics.collection import MIXED, collection_section, summary_text
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.metrics.repeat import require_one_job


def test_fingerprint_json_and_stderr_show_the_collection_options(copy_capture, tmp_path):
    cap = copy_capture("level1")
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 0, r.output
    sec = json.loads((tmp_path / "fp.json").read_text())["config"]["collection"]
    assert sec["options"] == {"with_stack": True, "record_shapes": True, "profile_memory": True,
                              "with_modules": True, "with_flops": False, "activities": "CPU,NPU", "l2_cache": True,
                              "schedule": {"wait": 0, "warmup": 10, "active": 1, "repeat": 1, "skip_first": 40}}
    assert sec["ranks_differ"] == {}
    assert ("perfgate: collection options: with_stack=true, record_shapes=true, profile_memory=true, "
            "with_modules=true, with_flops=false, activities=CPU,NPU, l2_cache=true, "
            "schedule=wait=0 warmup=10 active=1 repeat=1 skip_first=40") in r.output
    # stdout alone is the JSON document
    r = run("fingerprint", cap, "--trace", "never")
    assert json.loads(r.stdout)["config"]["collection"]["options"]["with_stack"] is True


def test_a_field_not_written_is_not_recorded_never_false(copy_capture, policy):
    cap = copy_capture("level1")
    edit_info(cap, lambda d: d["config"]["common_config"].pop("with_stack"))
    edit_info(cap, lambda d: d["config"]["common_config"].update(record_shapes=False))
    fp = fingerprint_path(cap, policy, with_trace="never", workers=1)
    opts = fp.config["collection"]["options"]
    assert opts["with_stack"] is None and opts["record_shapes"] is False
    assert "with_stack=not recorded" in summary_text(fp.config) and "record_shapes=false" in summary_text(fp.config)


def test_ranks_recording_different_options_are_said(copy_capture, policy):
    cap = copy_capture("level1")
    edit_info(cap, lambda d: d["config"]["common_config"].update(with_stack=False), ranks={1})
    fp = fingerprint_path(cap, policy, with_trace="never", workers=1)
    sec = fp.config["collection"]
    assert sec["options"]["with_stack"] == MIXED and sec["ranks_differ"] == {"with_stack": {"0": True, "1": False}}
    assert sec["options"]["record_shapes"] is True     # the options they agree on stay plain
    warn = [w for w in fp.warnings if "different profiler collection options" in w]
    assert warn and "with_stack: differs across ranks (rank 0 true, rank 1 false)" in warn[0]


def test_g2023_schedule_keys_and_a_rank_without_profiler_info(ascend):
    """G2023 writes the schedule's keys with a leading ``_``; a rank without profiler_info
    records nothing and does not count against the others."""
    info = read_profiler_info(ascend / "msinsight/server/src/test/test_data/test_rank_0/profiler_info_0.json")
    sec = collection_section({0: info, 1: {}})
    assert sec["options"]["schedule"] == {"wait": 1, "warmup": 0, "active": 1, "repeat": 1, "skip_first": 1}
    assert sec["options"]["with_stack"] is True and sec["options"]["activities"] == "CPU,NPU"
    assert sec["options"]["l2_cache"] is False and sec["ranks_differ"] == {}


def test_every_way_of_reading_a_capture_records_the_options(text_captures, policy):
    """The section is made where rank summaries are merged: fingerprint_capture (one process)
    and fingerprint_path (the command line's pool) record the same options."""
    one = fingerprint_capture(load_capture(text_captures / "level1", with_trace=False), policy)
    pooled = fingerprint_path(text_captures / "level1", policy, with_trace="never", workers=2)
    assert one.config["collection"] == pooled.config["collection"]
    assert one.config["collection"]["options"]["with_stack"] is True


def test_repeated_captures_of_one_side_share_the_options_that_change_what_is_measured(copy_capture, policy):
    """Pooling a with_stack run with runs without it would read its host overhead as noise
    (as repeated captures refuse mixed profiler levels); another schedule is the same job."""
    a, b, c = copy_capture("level1", "a"), copy_capture("level1", "b"), copy_capture("level1", "c")
    edit_info(b, lambda d: d["config"]["common_config"].update(with_stack=False))
    edit_info(c, lambda d: d["config"]["common_config"]["schedule"].update(skip_first=20))
    fps = [fingerprint_path(x, policy, with_trace="never", workers=1) for x in (a, b, c)]
    with pytest.raises(UsageError, match=r"capture 2 .* profiler collection option with_stack: true vs false"):
        require_one_job(fps[:2])
    with pytest.raises(UsageError, match=r"calibrate: capture 2 .* collection option with_stack: true vs false"):
        refuse_mixed(fps[:2])
    require_one_job([fps[0], fps[2]])
    refuse_mixed([fps[0], fps[2]])


def test_a_switch_spelled_as_text_or_a_number_is_one_value():
    """``"true"``, ``"True"`` and 1 are the profiler's true: two captures writing the same switch
    differently agree, and no note says ``true -> true``."""
    spelled = {0: {"collection": {"with_stack": True}}, 1: {"collection": {"with_stack": "true"}},
               2: {"collection": {"with_stack": "True"}}, 3: {"collection": {"with_stack": 1}}}
    section = collection_section(spelled)
    assert section["options"]["with_stack"] is True and section["ranks_differ"] == {}
    assert collection_section({0: {"collection": {"with_stack": "0"}}})["options"]["with_stack"] is False
    # a value that is no spelling of a switch stays as written, so a reader sees what was there
    assert collection_section({0: {"collection": {"with_stack": "yes"}}})["options"]["with_stack"] == "yes"


def test_a_schedule_count_written_as_integer_text_is_that_integer():
    """``"active": "1"`` is the profiler's 1: two captures writing the same schedule differently
    agree; text that is not exactly an integer stays as written."""
    as_text = collection_section({0: {"collection": {"schedule": {"wait": "0", "active": "1", "skip_first": "40"}}}})
    as_ints = collection_section({0: {"collection": {"schedule": {"wait": 0, "active": 1, "skip_first": 40}}}})
    assert as_text["options"]["schedule"] == as_ints["options"]["schedule"] == {"wait": 0, "active": 1,
                                                                               "skip_first": 40}
    odd = collection_section({0: {"collection": {"schedule": {"active": " 1", "warmup": "01", "wait": "1.0"}}}})
    assert odd["options"]["schedule"] == {"wait": "1.0", "warmup": "01", "active": " 1"}


def test_an_activity_is_its_short_name_in_any_case():
    lower = collection_section({0: {"collection": {"activities": ["npu", "cpu"]}}})
    enum = collection_section({0: {"collection": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"]}}})
    assert lower["options"]["activities"] == enum["options"]["activities"] == "CPU,NPU"


def test_a_null_field_is_not_recorded_on_its_rank(copy_capture, policy):
    """null is no value the profiler chose: a rank writing with_stack null does not count against
    the ranks recording it, as a rank without the field does not."""
    cap = copy_capture("level1")
    edit_info(cap, lambda d: d["config"]["common_config"].update(with_stack=None), ranks={1})
    fp = fingerprint_path(cap, policy, with_trace="never", workers=1)
    sec = fp.config["collection"]
    assert sec["options"]["with_stack"] is True and sec["ranks_differ"] == {}
    assert not [w for w in fp.warnings if "different profiler collection options" in w]


def test_activities_are_a_set_however_written():
    """A repeated entry, a string joined by commas and an empty list (torch.profiler's default,
    CPU and NPU) are the same activities as the list torch_npu writes."""
    written = ["ProfilerActivity.CPU", "ProfilerActivity.NPU"]
    same = {0: written, 1: [*written, "ProfilerActivity.NPU"], 2: "ProfilerActivity.CPU,ProfilerActivity.NPU",
            3: [], 4: ["npu", "cpu"]}
    section = collection_section({r: {"collection": {"activities": v}} for r, v in same.items()})
    assert section["options"]["activities"] == "CPU,NPU" and section["ranks_differ"] == {}
    npu_only = collection_section({0: {"collection": {"activities": "ProfilerActivity.NPU"}}})
    assert npu_only["options"]["activities"] == "NPU"
