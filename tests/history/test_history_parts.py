"""History judges parts as a check does: a MatMul slowdown from run 7 on is a
change of the MatMul parts only (rank0 and p50 alike), shares are shown in % and pp, and the
nightly report puts step time first."""
import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.app.gate import HistoryEntry, record_history
from perfgate.synth import SynthSpec, write_capture

MATMUL = "aclnnMatmul_MatMulV3Common_MatMulV3"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from perfgate.app.gate import load_checked_policy
    d = tmp_path_factory.mktemp("hist")
    policy = load_checked_policy()
    for i in range(12):
        spec = SynthSpec(seed=100 + i, jitter=0.02, slowdown={MATMUL: 1.3} if i >= 6 else {})
        record_history(write_capture(d / f"c{i}", spec), HistoryEntry("main", commit=f"c{i:02d}"), policy=policy,
                       history_path=d / "h.sqlite", env={})
    return d / "h.sqlite"


def _run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={}, catch_exceptions=False)
    return r.exit_code, r.output


def test_trend_finds_the_part_in_both_views_and_no_side_effect(db):
    code, out = _run("history", "trend", "--db", db)
    assert code == 0
    found = [x.split("`")[1].split(" (series")[0] for x in out.splitlines() if x.startswith("### ")]
    assert "share.category{category=MatMul,view=rank0}" in found and "share.category{category=MatMul,view=p50}" in found
    assert f"share.family{{family={MATMUL},view=rank0}}" in found
    side = [k for k in found if k.startswith("share.") and "MatMul" not in k and "AI_CORE" not in k]
    assert not side, side          # Comm / FA / Vector shares moved only because MatMul grew
    block = out.split("### `share.category{category=MatMul,view=rank0}")[1].split("### ")[0]
    assert "| 7 (#7) | c06 |" in block and "% regression |" in block


def test_comm_share_is_judged_as_a_part_and_has_no_change_point(db):
    # the plain Comm share falls ~4 pp at run 7 (MatMul grew); its own time did not change
    code, out = _run("history", "trend", "--db", db, "--metric", "share.category{category=Comm,view=p50}")
    assert code == 0 and "Judged as a part of the step" in out and "No change point" in out


def test_nightly_report_puts_step_time_first(db, tmp_path):
    code, out = _run("history", "report", "--db", db, "--out", tmp_path / "r", "--last", "12")
    assert code == 0
    md = (tmp_path / "r" / "report.md").read_text()
    order = [x.split("`")[1] for x in md.splitlines() if x.startswith("### ")]
    assert order[0].startswith("step.time_us") and order.index(order[0]) < len(order) - 1
    shares = [i for i, k in enumerate(order) if k.startswith("share.")]
    steps = [i for i, k in enumerate(order) if k.startswith("step.")]
    assert max(steps) < min(shares)
