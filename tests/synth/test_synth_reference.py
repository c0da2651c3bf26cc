"""The synthetic writers are faithful enough for the official tool: msprof-analyze
`compare` reads their files and writes its xlsx. Structure is checked always; the tool itself
runs when it is installed (PERFGATE_MSPROF_ANALYZE=path, or msprof-analyze on PATH)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from perfgate.synth.scale import write_scaled
from perfgate.synth.writer import LINKS, SynthSpec, write_capture


def _comm_files(cap):
    return sorted(cap.rglob("communication.json"))


@pytest.mark.parametrize("writer", ["scaled", "capture"])
def test_every_step_has_a_total_op_info_with_every_link(tmp_path, writer):
    cap = (write_scaled(tmp_path / "s", ranks=2, steps=3, kernels_per_step=50) if writer == "scaled"
           else write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=3)))
    files = _comm_files(cap)
    assert len(files) == 2
    for f in files:
        doc = json.loads(f.read_text())
        assert len(doc) == 3
        for step, kinds in doc.items():
            total = kinds["collective"]["Total Op Info"]
            ops = [v for k, v in kinds["collective"].items() if k != "Total Op Info"]
            assert total["Communication Time Info"]["Elapse Time(ms)"] == pytest.approx(
                sum(o["Communication Time Info"]["Elapse Time(ms)"] for o in ops))
            bw = total["Communication Bandwidth Info"]
            assert set(bw) == set(LINKS)
            assert all({"Transit Time(ms)", "Transit Size(MB)"} <= set(v) for v in bw.values())


def _msprof():
    return os.environ.get("PERFGATE_MSPROF_ANALYZE") or shutil.which("msprof-analyze")


@pytest.mark.skipif(not _msprof(), reason="msprof-analyze not installed (set PERFGATE_MSPROF_ANALYZE)")
def test_msprof_analyze_compare_writes_its_result_on_the_synthetic_pair(tmp_path):
    a = write_scaled(tmp_path / "a", ranks=1, steps=2, kernels_per_step=300)
    b = write_scaled(tmp_path / "b", ranks=1, steps=2, kernels_per_step=300, run=1)
    out = tmp_path / "out"
    r = subprocess.run([_msprof(), "compare", "-d", str(b / "rank0_ascend_pt"), "-bp", str(a / "rank0_ascend_pt"),
                        "-o", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0
    assert "[ERROR]" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]
    xlsx = list(out.glob("performance_comparison_result_*.xlsx"))
    assert len(xlsx) == 1 and xlsx[0].stat().st_size > 0
