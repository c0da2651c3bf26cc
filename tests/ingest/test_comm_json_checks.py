"""communication.json checked against the rest of its rank: the kernel table's communication tasks,
the step trace, the collection window and the other ranks' files; a foreign, damaged or copied file
is exit 3, a file whose ops are named otherwise is skipped with a reason."""
from __future__ import annotations

import json
import shutil

import pytest

from _cli import fingerprint_without_trace, run
from _edits import replace_once


def test_a_communication_json_from_another_capture_is_refused(copy_capture, text_captures):
    """level2's rank-0 communication.json copied into level1: its ops start ~3,591 s after
    profiler_info_0's collectionTimeEnd. It passed (exit 0), comm.wait_ratio and bandwidth read
    from the foreign file. Now exit 3, as a kernel row outside the collection window is."""
    cap = copy_capture("level1", "c")
    shutil.copy(text_captures / "level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json",
                cap / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json")
    r = run("fingerprint", cap, "--trace", "never", "-o", cap.parent / "fp.json")
    assert r.exit_code == 3, r.output
    assert "communication.json" in r.output and "Start Timestamp(us)" in r.output and "outside the collection window" in r.output


OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


@pytest.mark.parametrize("old, new, says", [
    # "Communication Bandwidth Info" of another type: a non-empty list crashed (exit 70), 0 / false / ""
    # read as "no links"; a link that is not an object was dropped without a word
    ('"Communication Bandwidth Info": {', '"Communication Bandwidth Info": [1], "x": {',
     "Communication Bandwidth Info is [1], not an object"),
    ('"Communication Bandwidth Info": {', '"Communication Bandwidth Info": false, "x": {',
     "Communication Bandwidth Info is false, not an object"),
    ('"RDMA": {', '"RDMA": "x", "y": {', 'Communication Bandwidth Info.RDMA is "x", not an object'),
    ('"RDMA": {', '"RDMA": null, "y": {', "Communication Bandwidth Info.RDMA is null, not an object"),
    # an integer beyond a float crashed in the reference reader (OverflowError, exit 70)
    ('"Elapse Time(ms)": ', '"Elapse Time(ms)": 1' + "0" * 400 + ', "z": ',
     "Elapse Time(ms) is 100000... (401 digits), not a finite non-negative number"),
    # an integer of more digits than Python converts (ValueError, exit 70): invalid JSON at its byte
    ('"Elapse Time(ms)": ', '"Elapse Time(ms)": 1' + "0" * 5000 + ', "z": ',
     "a number has more digits than Python reads"),
    # nested ~1,000 deep in a field never read: msgspec's RecursionError crashed (exit 70)
    ('"Wait Time Ratio": ', '"Wait Time Ratio": ' + "[" * 980 + "]" * 980 + ', "zz": ', "nesting too deep"),
    # \\d took Unicode digits: "step٥٠" was read as step 50
    ('"step50"', '"step\u0665\u0660"', "unexpected top-level key 'step\u0665\u0660'"),
])
def test_damaged_communication_json_is_exit_3_naming_what(copy_capture, tmp_path, old, new, says):
    cap = copy_capture("level1")
    replace_once(cap / OUT / "communication.json", old, new)
    r = fingerprint_without_trace(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "communication.json" in r.output and says in r.output, r.output
    assert not (tmp_path / "fp.json").exists()


def _comm_doc(cap, rank=0):
    path = cap / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    return path, json.loads(path.read_text())


def _dup_key_text(doc):
    """The document as JSON text with its second op's key repeated as its first's (last one wins)."""
    text = json.dumps(doc)
    names = list(doc["step50"]["collective"])
    return text.replace(json.dumps(names[1]), json.dumps(names[0]), 1)


@pytest.mark.parametrize("mutate, says", [
    (lambda d: _dup_key_text(d), "is in rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json 0 time(s) but among"),
    (lambda d: {**d, "step050": d["step50"]}, "2 time(s) but among"),
    (lambda d: {"step50": {**d["step50"], "weird": d["step50"]["collective"]}}, "2 time(s) but among"),
    (lambda d: json.dumps(d).replace('"Total Op Info"', '"Total Op Info "'), "op Total Op Info  is in"),
    (lambda d: json.dumps(d)[:-1] + ', "step50": {"collective": {}, "p2p": {}}}', "0 time(s) but among"),
])
def test_communication_json_is_checked_against_the_kernel_table(copy_capture, tmp_path, mutate, says):
    """communication.json was checked only against itself (Elapse = Transit + Wait + Idle), so an
    op lost under a duplicated key, a step under two spellings, an unknown kind, a renamed Total
    Op Info or a step emptied by a repeated key changed the comm metrics and passed (exit 0), and
    went into the baseline. comm_ops_vs_kernels pairs its ops with the kernel table's
    communication rows step by step: exit 3 naming the op and both files."""
    cap = copy_capture("level1")
    path, doc = _comm_doc(cap)
    out = mutate(doc)
    path.write_text(out if isinstance(out, str) else json.dumps(out))
    r = fingerprint_without_trace(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "self-check comm_ops_vs_kernels failed on rank 0 step 50" in r.output and says in r.output, r.output


def test_another_ranks_communication_json_is_exit_3(copy_capture, tmp_path):
    cap = copy_capture("level1")
    a, _ = _comm_doc(cap, 0)
    b, _ = _comm_doc(cap, 1)
    ta, tb = a.read_text(), b.read_text()
    a.write_text(tb)
    b.write_text(ta)
    r = fingerprint_without_trace(cap, tmp_path)
    assert r.exit_code == 3, r.output
    assert "comm_ops_vs_kernels failed on rank 0 step 50: Σ Elapse of 4 op(s)" in r.output
    assert "(difference -5616.591 us, tolerance 0.014 us)" in r.output


def test_ops_named_otherwise_are_skipped_not_failed(copy_capture, tmp_path):
    """A kernel table that names its communication tasks otherwise than communication.json (no
    name in common) cannot be paired: the check is skipped for the rank, the capture passes."""
    cap = copy_capture("level1")
    path, doc = _comm_doc(cap)
    path.write_text(json.dumps(doc).replace('"hcom_', '"hccl_'))
    assert fingerprint_without_trace(cap, tmp_path).exit_code == 0
    fp = json.loads((tmp_path / "fp.json").read_text())
    mine = [c for c in fp["self_checks"] if c["name"] == "comm_ops_vs_kernels"]
    assert [(c["rank"], c["status"]) for c in mine] == [(0, "skipped"), (1, "pass")]
    assert "name ops differently and cannot be paired" in mine[0]["message"]


@pytest.mark.real
def test_a_step_only_communication_json_has_is_refused(ascend, tmp_path):
    """A step 14 added to communication.json (in neither kernel_details.csv nor
    step_trace_time.csv) was averaged into comm.elapse_us: -47 %, "improved", exit 0."""
    import copy
    import json
    cap = tmp_path / "phantom"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    for r in (0, 1):
        p = cap / f"rank_{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"
        d = json.loads(p.read_text(encoding="utf-8"))
        d["step14"] = copy.deepcopy(d["step13"])
        p.write_text(json.dumps(d), encoding="utf-8")
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 3, r.output
    assert ("holds ops in step(s) 14, which neither kernel_details.csv (steps 13) nor step_trace_time.csv "
            "(steps 13) lists") in r.output
    assert "holds ops in step(s) 14, which step_trace_time.csv (steps 13) does not list" in r.output   # partial rank 1


@pytest.mark.real
def test_a_partial_rank_with_another_ranks_communication_json_is_refused(ascend, tmp_path):
    """st/level2 rank 1 (partial: no kernel table) given rank 0's communication.json: PASS and
    saved. Its ops' busy union (420,174 us) is not its own step_trace Communication (441,708 us)."""
    cap = tmp_path / "foreign"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    shutil.copy(cap / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json",
                cap / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json")
    bl = tmp_path / "bl"
    r = run("baseline", "save", "--name", "f", "--baseline-dir", bl, cap)
    assert r.exit_code == 3, r.output
    assert "is byte for byte the communication.json of rank 0" in r.output
    assert not bl.exists() or not list(bl.iterdir())


@pytest.mark.real
def test_a_partial_ranks_communication_json_is_checked_against_its_step_trace(ascend, tmp_path):
    """Not a byte copy but another rank's ops (a file edited, or of another run with the same
    steps): the busy union of its ops against its own step_trace Communication warns (the 2023
    files differ by ~0.9 %, so this cannot fail closed)."""
    import json
    cap = tmp_path / "foreign"
    shutil.copytree(ascend / "msinsight/test/st/level2", cap)
    d = json.loads((cap / "rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").read_text(encoding="utf-8"))
    (cap / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").write_text(json.dumps(d, indent=1),
                                                                                   encoding="utf-8")
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "never")
    assert r.exit_code == 0, r.output
    fp = json.loads((tmp_path / "fp.json").read_text())
    (check,) = [c for c in fp["self_checks"] if c["name"] == "comm_ops_vs_step_trace"]
    assert check["status"] == "warn" and "420,174.260 us differs from" in check["message"]
    assert "Communication 441,708.380 us" in check["message"]


def test_ranks_whose_communication_json_holds_no_op_may_be_equal(tmp_path):
    """Identical communication.json files without an op ({}, steps with no op) hold no times that
    could have been copied: not refused (a byte copy of one with ops is)."""
    from perfgate.synth.writer import SynthSpec, write_capture
    root = write_capture(tmp_path / "x", SynthSpec(comm_ops=0))
    for text in ('{}\\n', '{"step10": {"collective": {}, "p2p": {}}}'):
        for cm in root.rglob("communication.json"):
            cm.write_text(text, encoding="utf-8")
        r = run("fingerprint", root, "-o", tmp_path / "fp.json", "--trace", "never")
        assert r.exit_code == 0, (text, r.output)
