"""Smoke run of benchmarks/bench_verdicts.py (the full run is a script, see README): tiny pools,
2 vs 2 runs, so timing metrics are unsure while exact counts still decide."""
import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_verdicts.py"


def test_bench_verdicts_smoke(capsys):
    spec = importlib.util.spec_from_file_location("bench_verdicts", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(["--trials", "3", "--runs", "2", "--pool", "2", "--steps", "4", "--ranks", "1", "--no-real"])
    by = {r["scenario"]: r["stats"] for r in rows}
    assert set(by) == set(mod.SCENARIOS) and all(r["trials"] == 3 for r in rows)
    for scenario in ("extra_calls", "new_family"):            # counts are exact: always caught
        assert by[scenario]["default"]["fail"] == 3 and by[scenario]["default"]["target"] == 3
    assert by["no_change"]["default"]["fail"] == 0            # 2 vs 2: never a regression ...
    assert by["no_change"]["default"]["unsure"] == 3          # ... but unsure, never a silent pass
    assert by["step_time"]["default"]["classes"]["step"] == 0
    for scenario in ("family_faster", "device_drift"):        # nothing got slower: never a failure
        assert by[scenario]["default"]["fail"] == 0
    out = capsys.readouterr().out
    assert "| synthetic | step_time | 3 |" in out and "False alarms per metric class" in out
