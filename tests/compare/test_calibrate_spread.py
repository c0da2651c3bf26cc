"""A calibrated policy never fails its own training runs against each other:
four synthetic captures whose exposed communication read 10.45 / 3.79 / 3.91 / 3.86 %
gave a robust sigma of 0.09 pp and a proposed single-capture tolerance of 0.39 pp, and a check
of the first capture against the second failed. The single-capture tolerance is now at least
the captures' own spread, and the printout says so."""
import itertools

import pytest

from perfgate.compare.calibrate import propose_tolerances, render_table
from perfgate.app.gate import calibrate, check, save_baseline
from perfgate.policy import load_policy
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cal")
    return [write_capture(d / f"s{i}", SynthSpec(seed=i)) for i in range(4)]


@pytest.mark.slow   # ~6 s: every pair of four calibration runs
def test_every_pair_of_calibration_runs_passes(runs, tmp_path):
    pol = load_policy(None)
    out = tmp_path / "cal.yaml"
    calibrate([str(r) for r in runs], out, policy=pol)
    cal = load_policy(out)
    store = BaselineStore(tmp_path / "bl")
    for a, b in itertools.permutations(range(len(runs)), 2):
        save_baseline(runs[a], f"b{a}", policy=cal, store=store, env={}, force=True)
        r = check(runs[b], f"b{a}", policy=cal, store=store, env={})
        assert r.exit_code == 0, (a, b, [c.reason for c in r.comparisons if c.fails][:3])


def test_the_spread_sets_the_single_capture_tolerance_and_is_named(runs):
    from perfgate.app.run import fingerprint_path
    pol = load_policy(None)
    fps = [fingerprint_path(r, pol, with_trace=False) for r in runs]
    props = {p["metric"]: p for p in propose_tolerances(fps, pol)}
    p = props["step.exposed_comm_ratio"]
    vals = [fp.metrics[p["spread_key"]].value * 100 for fp in fps]
    assert p["spread"] == pytest.approx(max(vals) - min(vals))
    assert p["proposed_single"] >= p["spread"] - 1e-9 and p["spread_sets_single"]
    for q in props.values():
        assert q["proposed_single"] >= q["spread"] - 1e-9
    text = "\n".join(render_table(list(props.values()), len(fps), 3.0))
    assert "note: step.exposed_comm_ratio: the calibration captures differ by" in text
