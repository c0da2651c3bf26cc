"""The benchmark scripts find the shared real captures as tests/conftest.py does: $PERFGATE_SHARED
first, then the repository's sibling folder ../shared — so a clone that is not next to shared/
runs them (and tests/test_scale.py::test_benchmark_script_runs) with the variable set."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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


@pytest.mark.parametrize("script", ["bench_scale.py", "bench_verdicts.py"])
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
