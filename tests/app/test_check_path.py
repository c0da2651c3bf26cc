"""The ``check`` path around the fingerprint: self-checks grouped per
(check, rank) in the JUnit and Markdown reports, and the lost-device-tasks reason computed once
per comparison (equal to the per-metric scan it replaced, kept here as the oracle)."""
from __future__ import annotations

import dataclasses
import json

import pytest
from junitparser import Error, JUnitXml

from perfgate import terms
from perfgate.compare import rules
from perfgate.app.gate import check, save_baseline
from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.model import Finding, Fingerprint, SelfCheck
from perfgate.report import render_junit, render_markdown
from perfgate.report.markdown import LIMIT
from perfgate.report.selfchecks import MAX_STEPS_NAMED
from perfgate.store.baselines import BaselineStore, _parse
from perfgate.synth.replicate import replicate_rank

pytestmark = pytest.mark.real

STEPS, RANKS = 40, 2


@pytest.fixture(scope="module")
def many(text_captures, tmp_path_factory):
    """A real-shaped pair: level1 rank 0 replicated over 40 steps on 2 ranks (with its trace),
    baseline saved from run 0, the check result of run 1."""
    d = tmp_path_factory.mktemp("many")
    src = text_captures / "level1" / "rank0_ascend_pt"
    base = replicate_rank(src, d / "base", steps=STEPS, ranks=RANKS)
    cand = replicate_rank(src, d / "cand", steps=STEPS, ranks=RANKS, run=1)
    from perfgate.policy import load_policy
    pol = load_policy()
    store = BaselineStore(d / "bl")
    save_baseline(base, "main", policy=pol, store=store, env={})
    return check(cand, "main", policy=pol, store=store, env={}), store, cand


@pytest.fixture
def many_steps(many):
    return many[0]


def _self_check_cases(text, tmp_path):
    p = tmp_path / "j.xml"
    p.write_text(text)
    xml = JUnitXml.fromfile(str(p))
    return [c for s in xml if s.name.startswith("perfgate.self_checks") for c in s]


def test_junit_self_checks_are_one_case_per_check_and_rank(many_steps, tmp_path):
    r = many_steps
    names = {c.name for c in r.self_checks}
    per_step = [c for c in r.self_checks if c.step is not None]
    assert r.status == terms.PASS and len(names) >= 5
    assert len({c.step for c in per_step}) == STEPS and len({c.rank for c in r.self_checks}) == RANKS
    step_names = {c.name for c in per_step}   # op_statistic_vs_kernels is one per rank, not per step
    assert len(per_step) >= len(step_names) * RANKS * STEPS * 0.9   # per-step rows underneath
    cases = _self_check_cases(render_junit(r), tmp_path)
    assert len(cases) == len({(c.name, c.rank) for c in r.self_checks}) == len(names) * RANKS
    assert all(c.is_passed for c in cases)
    by = {c.name: c for c in cases}
    n = sum(1 for c in r.self_checks if (c.name, c.rank) == ("comm_equality", 1))
    assert by["comm_equality rank 1"].system_out == f"{n} step(s) checked: {n} pass"


def test_junit_grouped_failure_names_the_failing_steps_with_values(many_steps, tmp_path):
    """Two failing steps of one (check, rank): one <error> naming both steps; its text gives each
    step's message, expected / observed values and evidence. Twelve failing steps: the first ten
    named, "and 2 more"."""
    r = many_steps
    bad = {"7", "23"}
    checks = tuple(dataclasses.replace(c, status="fail", message=f"Σ mismatch at step {c.step}")
                   if (c.name, c.rank, c.step) in {("comm_equality", 1, s) for s in bad} else c
                   for c in r.self_checks)
    failing = [c for c in checks if c.status == "fail"]
    assert len(failing) == 2
    res = dataclasses.replace(r, self_checks=checks, status=terms.INVALID, exit_code=3, error={"message": "x"})
    cases = _self_check_cases(render_junit(res), tmp_path)
    errs = [c for c in cases if c.result and isinstance(c.result[0], Error)]
    assert [c.name for c in errs] == ["comm_equality rank 1"]
    n = sum(1 for c in checks if (c.name, c.rank) == ("comm_equality", 1))
    e = errs[0].result[0]
    assert e.message == f"2 of {n} steps failed (steps 7, 23): step 7: Σ mismatch at step 7"
    lines = e.text.splitlines()
    assert len(lines) == 2
    for c, line in zip(failing, lines):
        assert line.startswith(f"step {c.step}: Σ mismatch at step {c.step} (expected {c.expected}, "
                               f"observed {c.observed}") and line.endswith(f"evidence: {c.evidence}")
    assert errs[0].system_out == f"{n} step(s) checked: 2 fail, {n - 2} pass"
    # twelve failing steps: ten named in order, then a count
    steps12 = [c.step for c in checks if (c.name, c.rank) == ("comm_equality", 0)][:12]
    checks12 = tuple(dataclasses.replace(c, status="fail") if (c.name, c.rank) == ("comm_equality", 0)
                     and c.step in steps12 else c for c in r.self_checks)
    cases = _self_check_cases(render_junit(dataclasses.replace(r, self_checks=checks12)), tmp_path)
    e = [c for c in cases if c.name == "comm_equality rank 0"][0].result[0]
    assert e.message.startswith(f"12 of {n} steps failed (steps {', '.join(steps12[:MAX_STEPS_NAMED])} and 2 more)")
    assert e.text.splitlines()[-1].startswith("... and 2 more fail step(s)") and len(e.text.splitlines()) == 11


def test_junit_all_skipped_group_is_skipped_and_warnings_listed(many_steps, tmp_path):
    r = many_steps
    checks = tuple(dataclasses.replace(c, status="skipped", message="no trace") if c.name == "overlap_gap"
                   else dataclasses.replace(c, status="warn", message="close to tolerance")
                   if (c.name, c.rank, c.step) == ("compute_union", 0, "5") else c for c in r.self_checks)
    cases = {c.name: c for c in _self_check_cases(render_junit(dataclasses.replace(r, self_checks=checks)), tmp_path)}
    assert all(cases[f"overlap_gap rank {k}"].is_skipped for k in range(RANKS))
    w = cases["compute_union rank 0"]
    assert w.is_passed and "warning: 1 of" in w.system_out and "(steps 5): step 5: close to tolerance" in w.system_out


def test_markdown_self_checks_one_row_per_check_and_rank_late_failure_named(many_steps):
    """The Markdown listed every per-step row, so on a many-step capture the comment limit cut
    off a late failing step; grouped, the failing step is named in its (check, rank) row."""
    r = many_steps
    last = max((c.step for c in r.self_checks if c.step is not None), key=int)
    checks = tuple(dataclasses.replace(c, status="fail", message="late mismatch")
                   if (c.name, c.rank, c.step) == ("comm_op_identity", 1, last) else c for c in r.self_checks)
    md = render_markdown(dataclasses.replace(r, self_checks=checks))
    assert len(md) < LIMIT + 2000
    sec = md.split("<summary>Self-checks")[1].split("</details>")[0]
    rows = [x for x in sec.splitlines() if x.startswith("| ") and not x.startswith("| check")]
    assert len(rows) == len({(c.name, c.rank) for c in r.self_checks})
    row = [x for x in rows if x.startswith("| comm_op_identity | 1 |")][0]
    n = sum(1 for c in checks if (c.name, c.rank) == ("comm_op_identity", 1))
    assert f"| {n} | 1 fail, {n - 1} pass | 1 of {n} steps failed (steps {last}): step {last}: late mismatch |" in row


# -- DEVICE_TASKS_LOST: computed once per comparison, equal to the per-metric scan -----------------
def _old_incomplete_counts(ref, base, cand):
    """The per-metric scan compare_fingerprints ran before (oracle)."""
    if ref.unit != "calls":
        return None
    for side, fp in (("baseline", base), ("candidate", cand)):
        lost = [f for f in fp.findings if f.code == "DEVICE_TASKS_LOST"]
        if lost:
            where = ", ".join(f"rank {f.rank} step {f.step}" for f in lost[:4])
            return f"the {side} lost device tasks ({where}): its counts are incomplete"
    return None


def _lost(rank, step):
    return Finding("DEVICE_TASKS_LOST", "fail", rank, step, f"lost tasks in step {step}")


@pytest.mark.parametrize("side", ["none", "baseline", "candidate", "both"])
def test_lost_tasks_reason_once_equals_the_per_metric_scan(text_captures, policy, monkeypatch, side):
    b = fingerprint_capture(load_capture(text_captures / "level1"), policy)
    c = b     # the same capture on both sides: every count is comparable unless tasks were lost
    if side in ("baseline", "both"):
        b = dataclasses.replace(b, findings=b.findings + tuple(_lost(0, s) for s in ("50", "51", "52", "53", "54")))
    if side in ("candidate", "both"):
        c = dataclasses.replace(c, findings=(_lost(1, "7"),) + c.findings)
    new = rules.compare_fingerprints(b, c, policy)
    with monkeypatch.context() as m:
        m.setattr(rules, "_lost_tasks_reason", lambda base, cand: (base, cand))
        m.setattr(rules, "_incomplete_counts", lambda ref, bc: _old_incomplete_counts(ref, *bc))
        old = rules.compare_fingerprints(b, c, policy)
    assert new == old
    counts = [x for x in new[0] if x.unit == "calls"]
    assert counts
    lost = [x for x in counts if "lost device tasks" in x.reason]
    if side == "none":
        assert not lost
    else:
        where = ("baseline lost device tasks (rank 0 step 50, rank 0 step 51, rank 0 step 52, rank 0 step 53)"
                 if side in ("baseline", "both") else "candidate lost device tasks (rank 1 step 7)")
        assert len(lost) == len(counts) and all(x.verdict == terms.INCOMPARABLE and where in x.reason for x in lost)
        assert not [x for x in new[0] if x.unit != "calls" and "lost device tasks" in x.reason]


# -- baseline load: orjson, the standard library's documents and errors --------------------------
def test_baseline_load_equals_the_stdlib_reading(many):
    store = many[1]
    path = store.path_for("main")
    fp, meta = store.load("main")
    ref = Fingerprint.from_dict(json.loads(path.read_text("utf-8"))["fingerprint"])
    assert fp == ref and len(fp.self_checks) >= STEPS * RANKS * 5 and meta["name"] == "main"
    assert type(fp.self_checks[0]) is SelfCheck and fp.self_checks[0] == SelfCheck(**fp.self_checks[0].to_dict())
    assert {c.to_dict()["step"] for c in fp.self_checks} >= {str(k) for k in range(1, STEPS + 1)}


def test_baseline_parse_falls_back_to_the_stdlib_with_its_errors():
    # NaN / Infinity literals and integers beyond 64 bits: orjson refuses, the standard library reads
    odd = b'{"a": NaN, "b": -Infinity, "c": 123456789012345678901234567890, "d": [1.5, "\xc3\xa9"]}'
    got = _parse(odd)
    assert got["c"] == 123456789012345678901234567890 and got["d"] == [1.5, "\u00e9"]
    assert got["a"] != got["a"] and got["b"] == float("-inf")
    for bad in (b'{"a": 1,, }', b'\xef\xbb\xbf{"a": 1}', b'[1, 2', b""):
        with pytest.raises(json.JSONDecodeError) as mine:
            _parse(bad)
        with pytest.raises(json.JSONDecodeError) as std:
            json.loads(bad.decode("utf-8"))
        assert type(mine.value) is json.JSONDecodeError and (mine.value.msg, mine.value.pos) == (std.value.msg, std.value.pos)
    with pytest.raises(UnicodeDecodeError) as e:
        _parse(b'{"a": "\xff"}')
    assert e.value.start == 7


def test_selfcheck_and_finding_from_dict_fast_path_equals_init():
    d = SelfCheck("comm_equality", 0, "3", "pass", "m", 1.0, 1.0, 0.1, "ev").to_dict()
    assert SelfCheck.from_dict(d) == SelfCheck(**d) and hash(SelfCheck.from_dict(d)) == hash(SelfCheck(**d))
    f = Finding("DEVICE_TASKS_LOST", "fail", 1, "7", "lost")
    assert Finding.from_dict(f.to_dict()) == f
    assert Finding.from_dict({k: v for k, v in f.to_dict().items() if k not in ("value", "threshold")}) == f
    with pytest.raises(TypeError):
        SelfCheck.from_dict({**d, "extra": 1})
    with pytest.raises(TypeError):
        SelfCheck.from_dict({k: v for k, v in d.items() if k != "status"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        SelfCheck.from_dict(d).status = "fail"


# -- JSON result: orjson over the dataclasses, byte-equal to orjson over result.to_dict() -------
def _old_render_json(result) -> str:
    """The renderer before (oracle): orjson over ``result.to_dict()`` (asdict per comparison)."""
    import orjson
    return orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
                        | orjson.OPT_SERIALIZE_NUMPY).decode("utf-8") + "\n"


def test_json_result_equals_the_to_dict_rendering(many_steps, tmp_path):
    import math
    from perfgate.model import Comparison
    from perfgate.report import render_json
    from perfgate.report.json_report import render_json_bytes
    from perfgate.store.atomic import write_atomic
    r = many_steps
    odd = Comparison(key="x{view=p50}", name="x", labels={"view": "p50"}, verdict=terms.UNSURE, gated=True,
                     fails=False, baseline=float("nan"), candidate=math.inf, unit="us", caliber=None, tier=2,
                     delta=None, delta_rel=float("-inf"), tolerance="±5%", reason="r",
                     stats={"p": 0.04, "ci": (1.0, 2.0), "runs": [3, 4]},
                     attribution=[{"family": "MatMul", "delta_us": 1.5}])
    cases = [r, dataclasses.replace(r, comparisons=r.comparisons + (odd,), findings=(_lost(0, "3"),))]
    for res in cases:
        assert render_json(res) == _old_render_json(res)
        assert render_json_bytes(res) == _old_render_json(res).encode("utf-8")
    doc = json.loads(render_json(cases[1]))
    assert doc["comparisons"][-1]["baseline"] is None and doc["comparisons"][-1]["stats"]["ci"] == [1.0, 2.0]
    assert len(doc["self_checks"]) == len(r.self_checks) and doc["counts"] == cases[1].counts()
    # a value orjson refuses: the standard library renders result.to_dict()
    big = dataclasses.replace(odd, baseline=2 ** 70, delta_rel=None, candidate=1.0)
    res = dataclasses.replace(r, comparisons=(big,), self_checks=r.self_checks[:2])
    assert json.loads(render_json(res))["comparisons"][0]["baseline"] == 2 ** 70
    # the bytes are written as they are; text as UTF-8
    p = write_atomic(tmp_path / "r.json", render_json_bytes(res))
    assert p.read_bytes() == render_json(res).encode("utf-8")
    assert write_atomic(tmp_path / "t.txt", "ΣDuration").read_bytes() == "ΣDuration".encode("utf-8")


def test_check_reads_the_baseline_without_its_self_checks(many, policy, monkeypatch):
    """``load(self_checks=False)`` (what ``check`` asks for) differs from the full read only by
    the empty self-checks, and the check's comparisons equal those against the full baseline."""
    r, store, cand = many
    full, meta = store.load("main")
    lean, meta2 = store.load("main", self_checks=False)
    assert full.self_checks and lean.self_checks == () and meta == meta2
    assert dataclasses.replace(full, self_checks=()) == lean
    asked = []
    real = BaselineStore.load

    def spy(self, name, **kw):
        asked.append(kw)
        return real(self, name, **{**kw, "self_checks": force} if force else kw)
    monkeypatch.setattr(BaselineStore, "load", spy)
    force = False
    lean_r = check(cand, "main", policy=policy, store=store, env={})
    force = True
    full_r = check(cand, "main", policy=policy, store=store, env={})
    assert asked == [{"self_checks": False}] * 2
    assert [c.to_dict() for c in lean_r.comparisons] == [c.to_dict() for c in full_r.comparisons]
    assert lean_r.self_checks == full_r.self_checks == r.self_checks and lean_r.status == r.status
