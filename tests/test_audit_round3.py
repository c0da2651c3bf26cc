"""Defects found by the third audit round (a helper breaking check / baseline / history with
real-capture variations), each with the behaviour wanted."""
from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from perfgate.cli import main


def _run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env or {"GITHUB_EVENT_NAME": "push"})


def _partial_rank0(path):
    out = path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    for f in out.iterdir():
        if f.name not in ("step_trace_time.csv", "communication.json"):
            f.unlink() if f.is_file() else shutil.rmtree(f)
    return path


def _result(out):
    return json.loads((out / "perfgate-result.json").read_text())


def test_partial_rank0_is_not_every_family_gone(copy_capture, tmp_path):
    """level1 against itself with rank 0 cut down to step_trace_time.csv + communication.json:
    the rank0 view of the kernel metrics was not measured on that side. It read as 0 (every
    family "gone", hcom_allReduce the cause of a REGRESSION with 54 causes; the other way round
    every family "new"). It is not compared, with the reason, as the p50 view already was."""
    full = copy_capture("level1", "full")
    part = _partial_rank0(copy_capture("level1", "part"))
    bl = tmp_path / "bl"
    for name, cap in (("full", full), ("part", part)):
        r = _run("baseline", "save", "--name", name, "--baseline-dir", bl, cap)
        assert r.exit_code == 0, r.output
    for base, cand in (("full", part), ("part", full)):
        out = tmp_path / f"o-{base}"
        r = _run("check", "--baseline", base, "--baseline-dir", bl, cand, "--out", out)
        assert r.exit_code == 0 and "REGRESSION" not in r.output, r.output
        res = _result(out)
        assert res["counts"]["gated"]["regression"] == res["counts"]["gated"]["improvement"] == 0
        assert not res["causes"]
        rank0 = [c for c in res["comparisons"] if c["name"] == "kernel.calls_per_step"
                 and c["labels"].get("view") == "rank0"]
        assert rank0 and all(c["verdict"] == "incomparable" for c in rank0)
        side = "candidate" if base == "full" else "baseline"
        assert f"rank 0 holds no kernel table in the {side} (a partial rank" in rank0[0]["reason"]
