"""sweep.csv's step-time columns hold the step time ``check`` gates, and nothing where check says a
capture has no step time: a raw msprof capture (op_summary only, no step_trace_time.csv, no
timeline) leaves them empty instead of showing the device's wall span as a step time."""
import csv
import shutil
from pathlib import Path

import pytest

from perfgate.app.gate import check, save_baseline
from perfgate.app.run import fingerprint_path
from perfgate.app.sweep import run_sweep, write_rollup
from perfgate.store.baselines import BaselineStore

pytestmark = pytest.mark.real

MSPROF = ("vllm_ascend_msprof/PROF_GROUP_20260823_165254/PROF_L2Cache/"
          "PROF_000001_20260823165523228_00627338KRCOPCPN")   # SOURCES.md: raw msprof op_summary


@pytest.fixture
def swept(ascend, text_captures, tmp_path, policy):
    """A sweep over copies of the msprof capture and the text Level1 capture."""
    root = tmp_path / "root"
    shutil.copytree(ascend / MSPROF, root / "msprof" / MSPROF.rsplit("/", 1)[1])
    shutil.copytree(text_captures / "level1", root / "level1")
    table = run_sweep([root], policy, cache_dir=None, workers=1)
    files = write_rollup(table, tmp_path / "out", xlsx=False)
    with open(files["csv"], newline="", encoding="utf-8") as f:
        rows = {Path(r["capture"]).resolve().relative_to(root.resolve()).parts[0]: r for r in csv.DictReader(f)}
    return root, rows


def test_msprof_capture_has_no_step_time_in_the_sweep_as_in_check(swept, policy, tmp_path):
    root, rows = swept
    capture = next((root / "msprof").iterdir())
    fp = fingerprint_path(capture, policy)
    assert not any(m.name == "step.time_us" for m in fp.metrics.values())
    assert any(m.name == "step.wall_us" for m in fp.metrics.values())   # the wall span the sweep once showed
    ms = rows["msprof"]
    assert ms["status"] == "ok" and ms["step_time_rank0_us"] == "" and ms["step_time_p50_us"] == "", ms
    store = BaselineStore(tmp_path / "baselines")
    save_baseline(capture, "ms", policy=policy, store=store, env={})
    result = check(capture, "ms", policy=policy, store=store, env={})
    assert any(n.startswith("no step time on either side") for n in result.notes), result.notes


def test_a_capture_with_step_trace_time_keeps_its_step_time(swept, policy):
    root, rows = swept
    fp = fingerprint_path(root / "level1", policy)
    l1 = rows["level1"]
    for view in ("rank0", "p50"):
        assert float(l1[f"step_time_{view}_us"]) == pytest.approx(fp.metrics[f"step.time_us{{view={view}}}"].value)
