"""The benchmark scripts find the shared real captures as tests/conftest.py does: $PERFGATE_SHARED
first, then the repository's sibling folder ../shared — so a clone that is not next to shared/
runs them (and tests/app/test_scale.py's quick benchmark run) with the variable set."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _resolved(script: str, clone: Path, shared) -> tuple[str, str]:
    """(SHARED, FIXTURES or '') of benchmarks/``script`` copied into ``clone``, imported in a child."""
    dst = clone / "benchmarks" / script
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "benchmarks" / script, dst)
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_SHARED"}
    env["PYTHONPATH"] = str(REPO)
    if shared is not None:
        env["PERFGATE_SHARED"] = str(shared)
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('b', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "print(m.SHARED); print(getattr(m, 'FIXTURES', ''))")
    r = subprocess.run([sys.executable, "-c", code, str(dst)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    shared_s, fixtures = r.stdout.splitlines()[-2:]
    return shared_s, fixtures


@pytest.mark.parametrize("script", [pytest.param("bench_scale.py", marks=pytest.mark.slow), "bench_verdicts.py"])
def test_benchmark_finds_shared_from_the_variable_then_the_sibling(tmp_path, script):
    elsewhere = tmp_path / "data" / "my-shared"
    shared, fixtures = _resolved(script, tmp_path / "clone", elsewhere)
    assert Path(shared) == elsewhere
    if script == "bench_scale.py":
        assert Path(fixtures) == elsewhere / "fixtures" / "ascend" / "msinsight" / "test"
    shared, _ = _resolved(script, tmp_path / "clone", None)  # unset: the clone's sibling folder
    assert Path(shared) == tmp_path / "shared"
    shared, _ = _resolved(script, tmp_path / "clone", "")  # set but empty = unset
    assert Path(shared) == tmp_path / "shared"


def _bench_scale():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_scale_mem", REPO / "benchmarks" / "bench_scale.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


#: a process holding 120 MiB that starts a child holding 120 MiB for 1.5 s
_HOLD = "b = b'x' * (120 << 20); import time; time.sleep(1.5)"
_TREE = [sys.executable, "-c", f"import subprocess, sys; {_HOLD.split(';')[0]}; "
         f"subprocess.run([sys.executable, '-c', {_HOLD!r}], check=True)"]


def test_reference_memory_counts_the_whole_process_tree():
    """bench_scale.tree_pss_peak (the untimed memory run): peak PSS summed over a command and its
    children (a helper process that holds memory is counted), never only the largest process."""
    pytest.importorskip("psutil", reason="psutil (the bench extra) measures the process tree")
    mib = _bench_scale().tree_pss_peak(_TREE)
    assert mib > 240, mib          # two processes of > 120 MiB each, at once


def test_timed_runs_are_not_sampled_and_report_the_largest_process():
    """bench_scale.run_unsampled (the timed runs of both sides): wall time with nothing reading the
    process's memory map, and wait4's ru_maxrss, the largest single process of the tree."""
    wall, mib, r, cpu = _bench_scale().run_unsampled(_TREE)
    assert r.returncode == 0, r.stderr
    assert wall >= 1.5
    assert 120 < mib < 240, mib
    assert 0 < cpu < wall
