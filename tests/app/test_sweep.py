"""perfgate sweep over ../shared/fixtures/ascend (read in place): every capture found, one
rollup row each, unreadable ones listed with their reason, unchanged captures served from
the cache."""
import json

import pytest
from click.testing import CliRunner
from openpyxl import load_workbook

from perfgate.cli import main
from perfgate.errors import UsageError
from perfgate.app.sweep import COLUMNS, discover_captures, run_sweep
from perfgate.synth.transformer import write_transformer

pytestmark = pytest.mark.real

# SOURCES.md: the readable captures (text + DB exports of the G2025 job, two raw msprof PROF_
# folders, the mstt loose kernel tables, each read as one rank) and the folders perfgate cannot
# read (a malformed 2023 kernel_details.csv, a bare msprof DB).
OK = {"msinsight/test/data/pytorch/text/level0", "msinsight/test/data/pytorch/text/level1",
      "msinsight/test/data/pytorch/text/level2", "msinsight/test/data/pytorch/db/level0",
      "msinsight/test/data/pytorch/db/level1", "msinsight/test/data/pytorch/db/level2",
      "msinsight/test/st/level2",  # SOURCES.md 1e: ranks 0 (full) + 1 (partial) of a world-4 job
      "vllm_ascend_msprof/PROF_GROUP_20260823_165254/PROF_L2Cache/PROF_000001_20260823165523228_00627338KRCOPCPN",
      "vllm_ascend_msprof/prof_unpack/PROF_GROUP_20260823_165254/PROF_PipeUtilization/"
      "PROF_000001_20260823165326062_00625538CIGQAHCJ",
      "mstt/profiler/msprof_analyze/test/ut/advisor/advisor_backend/compute_advice",
      "mstt/profiler/msprof_analyze/test/ut/advisor/compute_advice/data"}
FAILED = {"msinsight/server/src/test/test_data": "expected 32 fields, found 31",
          "msinsight/server/src/test/test_data/full_db": "an msprof export in the database format",
          "msinsight/server/src/test/test_data/test_kernel_parse": "no ASCEND_PROFILER_OUTPUT"}


@pytest.fixture(scope="module")
def swept(ascend, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    r = CliRunner().invoke(main, ["sweep", str(ascend), "--out", str(out), "--workers", "2"], env={},
                           catch_exceptions=False)
    return r, out


def _rel(ascend, p):
    return str(__import__("pathlib").Path(p).resolve().relative_to(ascend.resolve()))


def test_discovery_finds_the_expected_set(ascend):
    found = {_rel(ascend, c) for _, c in discover_captures([ascend])}
    assert found == OK | set(FAILED)


def test_sweep_cli_rollup(ascend, swept):
    r, out = swept
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["captures"] == 14 and summary["ok"] == 11
    reasons = {_rel(ascend, f["capture"]): f["reason"] for f in summary["failed"]}
    assert set(reasons) == set(FAILED)
    assert all(FAILED[c] in reasons[c] for c in FAILED)
    import pandas as pd
    csv = pd.read_csv(out / "sweep.csv")
    assert list(csv.columns) == COLUMNS and len(csv) == 14
    raw_rows = (out / "sweep.csv").read_text().splitlines()[1:]
    assert all(",2.0," not in r for r in raw_rows)  # counts are written as integers, not floats
    ok = csv[csv["status"] == "ok"].set_index("capture")
    l1 = ok.loc[str(ascend / "msinsight/test/data/pytorch/text/level1")]
    assert (l1["ranks"], l1["steps"], l1["layers"], l1["top_hccl_kind"]) == (2, 1, 5, "allreduce")  # 5 model layers (layer.count): 5 forward + 5 backward conv layer segments
    assert l1["step_time_rank0_us"] > 0 and 0.9 < l1["comm_share"] < 0.95
    assert ok.loc[str(ascend / "msinsight/test/data/pytorch/text/level2"), "top_step_class"] == l1["top_step_class"]
    ws = load_workbook(out / "sweep.xlsx").active
    assert [c.value for c in ws[1]] == COLUMNS and ws.max_row == 15
    st = ok.loc[str(ascend / "msinsight/test/st/level2")]  # rank 0 of SOURCES.md 1e: step 13, ranks 0 + 1
    assert (st["ranks"], st["steps"]) == (2, 1)
    assert st["step_time_rank0_us"] == pytest.approx(231290.10 + 420174.26 + 158558.00, abs=0.01)


def test_second_sweep_is_served_from_cache(ascend, swept, policy):
    _, out = swept
    table = run_sweep([ascend], policy, cache_dir=out / ".cache", workers=1)
    assert table["cached"].all() and len(table) == 14


def test_changed_capture_is_recomputed(tmp_path, policy):
    write_transformer(tmp_path / "root" / "a", 3, ranks=1, steps=1)
    write_transformer(tmp_path / "root" / "b", 4, ranks=1, steps=1)
    cache = tmp_path / "cache"
    first = run_sweep([tmp_path / "root"], policy, cache_dir=cache, workers=1)
    assert list(first["layers"]) == [3, 4] and not first["cached"].any()
    write_transformer(tmp_path / "root" / "b", 5, ranks=1, steps=1)   # b rewritten: recomputed
    again = run_sweep([tmp_path / "root"], policy, cache_dir=cache, workers=1)
    assert list(again["layers"]) == [3, 5] and list(again["cached"]) == [True, False]
    with pytest.raises(UsageError, match="not a folder"):
        run_sweep([tmp_path / "nope"], policy)


def test_a_file_rewritten_with_its_size_and_mtime_put_back_is_recomputed(tmp_path, policy):
    """``touch -r``-style restores keep size and mtime but cannot keep the inode change time:
    the capture is fingerprinted again (the cache served it)."""
    import os
    import time
    write_transformer(tmp_path / "root" / "a", 3, ranks=1, steps=1)
    cache = tmp_path / "cache"
    assert not run_sweep([tmp_path / "root"], policy, cache_dir=cache, workers=1)["cached"].any()
    kd = next((tmp_path / "root" / "a").rglob("kernel_details.csv"))
    st = kd.stat()
    time.sleep(0.01)
    data = kd.read_bytes()
    kd.write_bytes(data)                       # same bytes, same size: only the inode change time moves
    os.utime(kd, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (kd.stat().st_size, kd.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert not run_sweep([tmp_path / "root"], policy, cache_dir=cache, workers=1)["cached"].any()
    assert run_sweep([tmp_path / "root"], policy, cache_dir=cache, workers=1)["cached"].all()


def test_cache_made_by_other_perfgate_code_is_not_served(tmp_path, policy, monkeypatch):
    """Same version string, other code (an upgrade between builds): every capture is recomputed."""
    from perfgate.app import sweep
    write_transformer(tmp_path / "root" / "a", 3, ranks=1, steps=1)
    cache = tmp_path / "cache"
    assert not run_sweep([tmp_path / "root"], policy, cache_dir=cache, workers=1)["cached"].any()
    assert run_sweep([tmp_path / "root"], policy, cache_dir=cache, workers=1)["cached"].all()
    monkeypatch.setattr(sweep, "_CODE_DIGEST", ["another-build"])
    assert not run_sweep([tmp_path / "root"], policy, cache_dir=cache, workers=1)["cached"].any()


def test_code_digest_covers_the_package_source():
    from perfgate.app import sweep
    assert len(sweep.code_digest()) == 16 and sweep.code_digest() == sweep.code_digest()


def test_missing_or_empty_root_is_a_usage_error_saying_which(tmp_path):
    from click.testing import CliRunner

    from perfgate.cli import main
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "nope"), "--out", str(tmp_path / "o.csv")])
    assert r.exit_code == 2 and f"sweep root does not exist (not a folder): {tmp_path / 'nope'}" in r.output
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "empty"), "--out", str(tmp_path / "o.csv")])
    assert r.exit_code == 2 and "no capture found under" in r.output and not (tmp_path / "o.csv").exists()


def test_a_root_of_links_to_runs_sweeps_each_run_once_under_its_link_name(tmp_path, policy):
    """Runs kept elsewhere, linked into the sweep root; a second link to one run and a link back up
    the tree neither double a row nor loop."""
    write_transformer(tmp_path / "store" / "run_a", 3, ranks=1, steps=1)
    write_transformer(tmp_path / "store" / "run_b", 4, ranks=1, steps=1)
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "a").symlink_to(tmp_path / "store" / "run_a", target_is_directory=True)
    (root / "b").symlink_to(tmp_path / "store" / "run_b", target_is_directory=True)
    (root / "b_again").symlink_to(tmp_path / "store" / "run_b", target_is_directory=True)
    (root / "more").mkdir()
    (root / "more" / "up").symlink_to(root, target_is_directory=True)   # a cycle
    (root / "c").symlink_to(tmp_path / "store" / "run_c_deleted", target_is_directory=True)
    table = run_sweep([root], policy, workers=1)
    assert list(table["capture"]) == [str(root / "a"), str(root / "b"), str(root / "c")]
    assert list(table["layers"][:2]) == [3, 4] and list(table["status"]) == ["ok", "ok", "failed"]
    assert "symbolic link to nothing" in table["reason"][2]
