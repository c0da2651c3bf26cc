"""A capture file whose name holds something else (a folder, a symbolic link loop such as
``ln -s kernel_details.csv kernel_details.csv``, a link to nothing) is an invalid capture
(exit 3) naming the path and what is there, never "no kernel_details.csv" / "not present"
(a kernel_details.csv folder was "incomplete profile: no
kernel_details.csv"; a kernel_details.csv linked to itself said the same). Every file
perfgate reads, wherever discovery or loading looks for it; nothing is written to baselines or
history."""
import json
import os
import shutil

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from _refusals import assert_refused_everywhere
from perfgate.errors import InvalidCaptureError
from perfgate.ingest import load_capture
from perfgate.ingest.discover import entry_kind
from perfgate.synth import SynthSpec, write_capture

R0 = "rank0_ascend_pt"
OUT0 = f"{R0}/ASCEND_PROFILER_OUTPUT"
SAID = {"folder": "is a folder (directory), not a file", "self_loop": "is a symbolic link loop",
        "two_link_loop": "is a symbolic link loop", "dangling": "is a symbolic link to nothing"}


def _replace(p, kind, tmp_path):
    """Put ``kind`` under the name ``p`` (its file, if any, removed)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()
    if kind == "folder":
        p.mkdir()
        (p / "inside.txt").write_text("x")
    elif kind == "self_loop":
        p.symlink_to(p.name)                      # ln -s kernel_details.csv kernel_details.csv
    elif kind == "two_link_loop":
        other = p.with_name(p.name + ".other")
        other.symlink_to(p.name)
        p.symlink_to(other.name)
    elif kind == "dangling":
        p.symlink_to(tmp_path / "gone")


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean") / "cap"
    write_capture(root, SynthSpec(seed=4, steps=2))
    (root / R0 / "profiler_metadata.json").write_text(json.dumps({"ENV_VARIABLES": {}}))
    return root


@pytest.mark.parametrize("kind", list(SAID))
@pytest.mark.parametrize("rel", [f"{OUT0}/kernel_details.csv", f"{OUT0}/step_trace_time.csv",
                                 f"{OUT0}/communication.json", f"{OUT0}/trace_view.json",
                                 f"{R0}/profiler_info_0.json", f"{R0}/profiler_metadata.json"])
def test_a_capture_file_that_is_not_a_file_is_named(clean, tmp_path, rel, kind):
    cap = tmp_path / "cap"
    shutil.copytree(clean, cap, symlinks=True)
    p = cap / rel
    _replace(p, kind, tmp_path)
    assert entry_kind(p) == ("loop" if "loop" in kind else kind)
    with pytest.raises(InvalidCaptureError) as e:
        load_capture(cap)
    assert e.value.path == str(p), str(e.value)
    assert f"{p.name} {SAID[kind]}" in e.value.message
    assert "no kernel_details.csv" not in str(e.value)


@pytest.mark.parametrize("rel", [R0, OUT0])
@pytest.mark.parametrize("kind", ["self_loop", "dangling"])
def test_a_rank_folder_that_is_a_broken_link_is_named_not_dropped(clean, tmp_path, rel, kind):
    """A rank folder (or its output folder) that is a link loop would otherwise be skipped: the
    capture silently one rank short."""
    cap = tmp_path / "cap"
    shutil.copytree(clean, cap, symlinks=True)
    _replace(cap / rel, kind, tmp_path)
    with pytest.raises(InvalidCaptureError) as e:
        load_capture(cap)
    assert e.value.path == str(cap / rel) and SAID[kind] in e.value.message, str(e.value)


def test_the_capture_path_itself_a_link_loop(tmp_path):
    p = tmp_path / "cap"
    p.symlink_to("cap")
    with pytest.raises(InvalidCaptureError, match="cap is a symbolic link loop"):
        load_capture(p)


def test_check_exits_3_and_writes_nothing(clean, tmp_path):
    bl = tmp_path / "bl"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(clean), "--baseline-dir", str(bl)],
                           env={})
    assert r.exit_code == 0, r.output
    cap = tmp_path / "cap"
    shutil.copytree(clean, cap, symlinks=True)
    _replace(cap / OUT0 / "kernel_details.csv", "self_loop", tmp_path)
    needle = f"{OUT0}/kernel_details.csv: kernel_details.csv is a symbolic link loop"
    assert_refused_everywhere(cap, bl, tmp_path, needle)


@pytest.mark.real
@pytest.mark.parametrize("name", ["ascend_pytorch_profiler_0.db", "analysis.db"])
@pytest.mark.parametrize("kind", ["folder", "self_loop"])
def test_db_export_files(ascend, tmp_path, name, kind):
    cap = tmp_path / "db"
    shutil.copytree(ascend / "msinsight/test/data/pytorch/db/level1", cap)
    p = cap / OUT0 / name
    _replace(p, kind, tmp_path)
    with pytest.raises(InvalidCaptureError) as e:
        load_capture(cap)
    assert e.value.path == str(p) and f"{name} {SAID[kind]}" in e.value.message, str(e.value)


@pytest.mark.real
@pytest.mark.parametrize("kind", ["folder", "self_loop"])
def test_msprof_op_summary(ascend, tmp_path, kind):
    src = next((ascend / "vllm_ascend_msprof").rglob("op_summary_20260823165335.csv"))
    out = tmp_path / "PROF_1" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    shutil.copyfile(src, out / src.name)
    bad = out / "op_summary_slice_1_20260823165335.csv"
    _replace(bad, kind, tmp_path)
    with pytest.raises(InvalidCaptureError) as e:
        load_capture(tmp_path / "PROF_1")
    assert e.value.path == str(bad) and SAID[kind] in e.value.message, str(e.value)
