"""The rolling baseline of a history:BRANCH check pools runs of the candidate's rank ids only and
never the candidate itself once it is recorded."""
from __future__ import annotations

import json
import shutil


from _cli import run


def _result(out):
    return json.loads((out / "perfgate-result.json").read_text())


def _rank_subset(src, dst, ranks, other=None, other_ranks=()):
    dst.mkdir()
    for r in ranks:
        shutil.copytree(src / f"rank{r}_ascend_pt", dst / f"rank{r}_ascend_pt")
    for r in other_ranks:
        shutil.copytree(other / f"rank{r}_ascend_pt", dst / f"rank{r}_ascend_pt")
    return dst


def test_history_pool_leaves_out_runs_of_other_rank_ids(tmp_path):
    """Three runs profiled ranks 0,1 and two ranks 0,3 (rank 3 another pipeline stage, twice the
    Cast calls), all on main: one series (its key hashes the rank count). A ranks-0,3 candidate
    was judged against the median of all five (REGRESSION, Cast calls 10 -> 15/step), and a
    ranks-0,1 run of the pool was refused (exit 4: "baseline ranks [0, 3]", the newest run's).
    Now the pool holds the candidate's rank set only, and says which runs it left out."""
    from perfgate.synth.writer import SynthSpec, write_capture
    caps = {}
    for s in range(21, 27):
        n = write_capture(tmp_path / f"n{s}", SynthSpec(ranks=4, steps=3, seed=s))
        x = write_capture(tmp_path / f"x{s}", SynthSpec(ranks=4, steps=3, seed=s,
                                                         extra_calls={"aclnnCast_CastAiCore_Cast": 2}))
        caps[("01", s)] = _rank_subset(n, tmp_path / f"a01_{s}", (0, 1))
        caps[("03", s)] = _rank_subset(n, tmp_path / f"a03_{s}", (0,), x, (3,))
    db = tmp_path / "h.sqlite"
    for key in [("01", 21), ("01", 22), ("01", 23), ("03", 24), ("03", 25)]:
        r = run("history", "record", "--db", db, "--branch", "main", "--commit", f"c{key[0]}{key[1]}", caps[key])
        assert r.exit_code == 0, r.output
    r = run("check", "--baseline", "history:main", "--db", db, caps[("03", 26)], "--out", tmp_path / "o1")
    assert r.exit_code == 0, r.output
    res = _result(tmp_path / "o1")
    assert res["baseline_provenance"]["runs"] == [5, 4] and res["baseline_provenance"]["other_rank_runs"] == [1, 2, 3]
    assert any("left out: they profiled other ranks" in n for n in res["notes"])
    r = run("check", "--baseline", "history:main", "--db", db, caps[("01", 21)], "--out", tmp_path / "o2")
    assert r.exit_code == 0, r.output
    # a rank set with too few runs: no baseline (exit 4), the message names the runs left out
    _rank_subset(tmp_path / "n21", tmp_path / "a02", (0, 2))
    r = run("check", "--baseline", "history:main", "--db", db, tmp_path / "a02", "--out", tmp_path / "o3")
    assert r.exit_code == 4 and "profiled other ranks than the candidate's [0, 2]" in r.output, r.output


def test_a_recorded_candidate_is_not_part_of_its_own_rolling_baseline(tmp_path):
    """A regressing candidate checked against history:main failed (exit 1); recorded, then
    checked again, it joined the median it was compared with and passed (exit 0)."""
    from perfgate.synth.writer import SynthSpec, write_capture
    db = tmp_path / "h.sqlite"
    for i in range(1, 6):
        cap = write_capture(tmp_path / f"s{i}", SynthSpec(steps=5, seed=i))
        assert run("history", "record", "--branch", "main", "--commit", f"p{i}", "--db", db, cap).exit_code == 0
    slow = {"aclnnMatmul_MatMulV3Common_MatMulV3": 1.3}
    for i in (6, 7):
        cap = write_capture(tmp_path / f"c{i}", SynthSpec(steps=5, seed=10 + i, slowdown=slow))
        assert run("history", "record", "--branch", "main", "--commit", f"p{i}", "--db", db, cap).exit_code == 0
    cand = write_capture(tmp_path / "c8", SynthSpec(steps=5, seed=18, slowdown=slow))
    args = ("check", "--baseline", "history:main", "--db", db, "--out", tmp_path / "o", "-v", cand)
    first = run(*args)
    assert first.exit_code == 1, first.output
    assert run("history", "record", "--branch", "main", "--commit", "p8", "--db", db, cand).exit_code == 0
    again = run(*args)
    assert again.exit_code == 1, again.output
    assert "left out: the candidate itself, already recorded" in again.output
