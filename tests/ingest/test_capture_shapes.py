"""Capture shapes without the folder names discovery looks for, built from real files (symbolic
links into tmp_path): ASCEND_PROFILER_OUTPUT's files at the given folder's root (the folder name
dropped on upload) and a loose kernel_details.csv are read as one rank; an msprof ``--type=db``
export and a root holding two msprof runs are refused naming what was found and the command
that gives what perfgate reads."""
from __future__ import annotations

import json

import pytest

from _cli import run
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.discover import discover

MSTT_KERNELS = "mstt/profiler/msprof_analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
MSPROF_DB = "msinsight/server/src/test/test_data/full_db/msprof_0.db"


def _link_files(src, dst):
    """``dst`` made to hold a symbolic link to every file of ``src`` (not its folders)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).symlink_to(f)
    return dst


def _fingerprint(cap, out):
    r = run("fingerprint", cap, "-o", out, "--trace", "never")
    return r, (json.loads(out.read_text()) if r.exit_code == 0 else None)


def test_output_files_at_the_folder_root_are_read_as_that_rank(text_captures, tmp_path):
    """level1 rank 1's ASCEND_PROFILER_OUTPUT files and profiler_info_1.json side by side in one
    folder (an artifact upload of the folder's contents): it was refused with a hint about
    *_ascend_pt folders; now it is rank 1 with the very metrics of the rank folder it came from,
    and a warning names the shape."""
    rank = text_captures / "level1" / "rank1_ascend_pt"
    flat = _link_files(rank / "ASCEND_PROFILER_OUTPUT", tmp_path / "upload")
    for f in ("profiler_info_1.json", "profiler_metadata.json"):
        (flat / f).symlink_to(rank / f)
    r, fp = _fingerprint(flat, tmp_path / "flat.json")
    assert r.exit_code == 0, r.output
    assert fp["config"]["ranks"] == [1]
    assert any("holds ASCEND_PROFILER_OUTPUT/'s files at its own root" in w and "folder name was dropped" in w
               for w in fp["warnings"]), fp["warnings"]
    _, whole = _fingerprint(rank, tmp_path / "rank.json")
    assert {k: m["value"] for k, m in fp["metrics"].items()} == {k: m["value"] for k, m in whole["metrics"].items()}


def test_output_files_at_the_root_without_profiler_info_are_rank_0(text_captures, tmp_path):
    """The same upload without profiler_info: one rank, assumed 0, its missing profiler_info named."""
    flat = _link_files(text_captures / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT", tmp_path / "up")
    locs = discover(flat)
    assert [(loc.rank, loc.rank_dir, loc.output_dir) for loc in locs] == [(0, flat, flat)]
    assert any("has no profiler_info_<N>.json" in w for w in locs[0].warnings)


def test_rank_folders_holding_their_output_files_at_their_root_are_read(text_captures, tmp_path):
    """Both level1 rank folders uploaded without their ASCEND_PROFILER_OUTPUT/ level (the files beside
    profiler_info_<N>.json): each was "rank folder has no ASCEND_PROFILER_OUTPUT/"; now ranks 0
    and 1 with the metrics of the capture they came from."""
    cap = tmp_path / "job"
    for r in (0, 1):
        rank = text_captures / "level1" / f"rank{r}_ascend_pt"
        flat = _link_files(rank / "ASCEND_PROFILER_OUTPUT", cap / rank.name)
        _link_files(rank, flat)
    r, fp = _fingerprint(cap, tmp_path / "flat.json")
    assert r.exit_code == 0, r.output
    assert fp["config"]["ranks"] == [0, 1]
    assert sum("folder name was dropped" in w for w in fp["warnings"]) == 2
    _, whole = _fingerprint(text_captures / "level1", tmp_path / "whole.json")
    assert {k: m["value"] for k, m in fp["metrics"].items()} == {k: m["value"] for k, m in whole["metrics"].items()}


def test_a_loose_kernel_table_is_a_one_rank_capture(ascend, tmp_path):
    """The mstt test data's loose kernel_details.csv, given as the capture: it had to be copied into
    a folder by hand; now its folder is read as one rank, and the files it lacks are named."""
    loose = tmp_path / "artifact" / "kernel_details.csv"
    loose.parent.mkdir()
    loose.symlink_to(ascend / MSTT_KERNELS)
    r, fp = _fingerprint(loose, tmp_path / "fp.json")
    assert r.exit_code == 0, r.output
    assert fp["config"]["ranks"] == [0]
    warnings = "\n".join(fp["warnings"])
    assert "the capture is a loose kernel_details.csv: its folder" in warnings
    for missing in ("step_trace_time.csv", "communication.json", "trace_view.json"):
        assert f"{missing} not present" in warnings
    assert fp["metrics"]["kernel.total_calls_per_step{view=rank0}"]["value"] > 0


def test_another_loose_file_is_still_refused(tmp_path):
    f = tmp_path / "op_summary.csv"
    f.write_text("x\n")
    with pytest.raises(InvalidCaptureError, match="got a file"):
        discover(f)


def test_an_msprof_db_export_names_the_text_export_command(ascend, tmp_path):
    """A PROF_ folder holding only msprof_<ts>.db (msprof --type=db; its schema has no META_DATA
    version and no step table perfgate could read): exit 3 naming the database and the msprof
    command that writes the text export, not a generic "nothing found"."""
    prof = tmp_path / "cap" / "PROF_000001_20260101000000000_ABCDEFGH"
    prof.mkdir(parents=True)
    (prof / "msprof_20260101000000.db").symlink_to(ascend / MSPROF_DB)
    r = run("fingerprint", tmp_path / "cap", "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert "found PROF_000001_20260101000000000_ABCDEFGH/msprof_20260101000000.db: an msprof export in the " \
           "database format (msprof --type=db)" in r.output
    assert f"`msprof --export=on --type=text --output={prof}`" in r.output


def test_two_msprof_runs_name_each_run_and_the_command_for_one(ascend, tmp_path):
    """The vllm_ascend capture's two PROF_ runs (PipeUtilization, L2Cache) under one folder: it was
    "cannot tell the rank of 2 folder(s)" with no word about pointing at one of them; now both runs
    are named with the command for one, and that command's capture reads."""
    runs = sorted((ascend / "vllm_ascend_msprof").rglob("PROF_000001_*"), key=lambda p: p.name)
    assert len(runs) == 2
    cap = tmp_path / "cap"
    cap.mkdir()
    for src in runs:
        (cap / src.name).symlink_to(src, target_is_directory=True)
    r = run("fingerprint", cap, "-o", tmp_path / "fp.json")
    assert r.exit_code == 3, r.output
    assert f"found 2 msprof runs ({runs[0].name}, {runs[1].name}) and no rank recorded" in r.output
    one = cap / runs[0].name
    assert f"`perfgate check --baseline NAME {one}`" in r.output
    r, fp = _fingerprint(one, tmp_path / "one.json")
    assert r.exit_code == 0 and fp["config"]["ranks"] == [0], r.output


def test_an_output_onto_a_loose_kernel_table_is_refused(synth_cap, tmp_path):
    """A loose kernel_details.csv is a capture: an output path onto it (or onto another capture
    file beside it) is refused before anything is written, as inside a rank folder."""
    loose = tmp_path / "artifact" / "kernel_details.csv"
    loose.parent.mkdir()
    before = next(synth_cap.rglob("kernel_details.csv")).read_bytes()
    loose.write_bytes(before)
    for target in (loose, loose.parent / "trace_view.json"):
        r = run("fingerprint", "-o", target, loose)
        assert r.exit_code == 2 and "never writes among a capture's files" in r.output, r.output
    assert loose.read_bytes() == before and not (loose.parent / "trace_view.json").exists()
