"""Every labelled metric names its label values wherever a report names it, and the reports take
a comparison's subject from the comparison, not by cutting its reason at the first colon
(the four ``comm.calls_per_step`` rows of the Markdown table all read "HCCL op
calls per step of one kind (allreduce, allgather, ...)", and 89 cells of a real check ended with
an unclosed "(new", the reason's "(new: absent from the baseline)" cut at its colon)."""
from __future__ import annotations

import json

from click.testing import CliRunner

from perfgate.cli import main
from perfgate.compare.rules import compare_fingerprints
from perfgate.metrics import registry
from perfgate.model import Comparison
from perfgate.synth import SynthSpec, write_capture


def test_every_labelled_metric_names_each_label_value():
    for name, d in registry.REGISTRY.items():
        labels = {lab: f"LBL{i}X" for i, lab in enumerate(d.labels) if lab != "view"}
        if not labels:
            continue
        if "caliber" in labels:   # a caliber label is shown by its report name
            labels["caliber"] = "sum_duration"
        text = registry.subject(name, labels)
        for lab, value in labels.items():
            shown = "ΣDuration" if lab == "caliber" else value
            assert shown in text, (name, lab, text)


def _check(tmp_path, edit):
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    bl = tmp_path / "bl"
    r = CliRunner()
    assert r.invoke(main, ["baseline", "save", "--name", "full", str(cap), "--baseline-dir", str(bl)]).exit_code == 0
    doc = json.loads((bl / "full.json").read_text())
    edit(doc["fingerprint"]["metrics"])
    (bl / "cut.json").write_text(json.dumps(doc))
    out = tmp_path / "o"
    res = r.invoke(main, ["check", "--baseline", "cut", str(cap), "--baseline-dir", str(bl), "--out", str(out)],
                   env={})
    return res, (out / "perfgate-report.md").read_text(), json.loads((out / "perfgate-result.json").read_text())


def test_a_new_hccl_kind_row_names_its_kind_and_no_cell_is_cut_at_the_reason_colon(tmp_path):
    def drop_allreduce(metrics):
        for k in [k for k in metrics if k.startswith("comm.calls_per_step{kind=allreduce")]:
            metrics.pop(k)
    res, md, doc = _check(tmp_path, drop_allreduce)
    assert res.exit_code == 1, res.output          # 0 -> N calls of a gated exact count
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and "calls per step" in ln and "HCCL" in ln]
    assert rows and all("HCCL allreduce calls per step" in ln for ln in rows), rows
    assert "(new |" not in md and not any(ln.rstrip().endswith("(new") for ln in md.splitlines())
    new = [c for c in doc["comparisons"] if c["key"].startswith("comm.calls_per_step{kind=allreduce")]
    assert new and all(c["subject"].startswith("HCCL allreduce calls per step [") for c in new), new
    assert all("(new: absent from the baseline)" in c["reason"] for c in new)


def test_comparisons_carry_their_subject_and_the_reason_starts_with_it(tmp_path):
    from perfgate.policy.load import load_policy
    from perfgate.app.run import fingerprint_path
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    policy = load_policy(None)
    fp = fingerprint_path(cap, policy)
    comps, _ = compare_fingerprints(fp, fp, policy)
    assert comps
    for c in comps:
        assert c.subject, c.key
        assert c.reason.startswith(c.subject), (c.subject, c.reason)
        assert c.subject_text() == c.subject


def test_a_hand_built_comparison_without_subject_falls_back_to_its_reason():
    c = Comparison(key="x", name="x", labels={}, verdict="unchanged", gated=False, fails=False, baseline=1,
                   candidate=1, unit="us", caliber=None, tier=3, delta=0, delta_rel=0, tolerance="",
                   reason="the thing: 1 -> 1, within tolerance")
    assert c.subject_text() == "the thing"
    assert c.reason_tail() == "1 -> 1, within tolerance"


def test_a_changed_count_of_left_out_kernel_rows_is_a_capture_quality_cause(tmp_path):
    """An N/A Duration row (kernel.invalid_rows 0 -> 1) was listed "no cause found": it is its own cause, named as the capture's data, with the rows as evidence."""
    from dataclasses import replace

    from perfgate.compare.causes import find_causes
    from perfgate.policy.load import load_policy
    from perfgate.app.run import fingerprint_path
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    policy = load_policy(None)
    base = fingerprint_path(cap, policy)
    keys = [k for k in base.metrics if k.startswith("kernel.invalid_rows{")]
    assert keys and all(base.metrics[k].value == 0 for k in keys)
    cand = replace(base, metrics={**base.metrics, **{k: replace(
        base.metrics[k], value=2.0, evidence="rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv rows 5, 9")
        for k in keys}})
    comps, _ = compare_fingerprints(base, cand, policy)
    moved = sorted(c.key for c in comps if c.gated and c.verdict in ("regression", "improvement"))
    assert moved and all(k.startswith("kernel.invalid_rows{") for k in moved), moved
    causes, unexplained = find_causes(comps, base, cand)
    assert unexplained == []
    (x,) = causes
    assert x["kind"] == "capture quality" and "N/A or empty Duration" in x["subject"]
    assert sorted(x["explains"]) == moved and x["fails"]
    assert x["what"].startswith("0 -> 2 row(s)") and "rows 5, 9" in x["what"]
    assert x["step_delta_us"] is None


def test_a_failed_self_check_names_the_rows_the_rank_left_out(tmp_path):
    """An N/A Duration(us) row makes the step's busy union fall short of the trace; the failure
    named only the two figures. It now names the left-out rows as the suspect."""
    import csv
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    kd = next(cap.rglob("kernel_details.csv"))
    rows = list(csv.reader(kd.open(newline="")))
    d = rows[0].index("Duration(us)")
    rows[5][d] = "N/A"
    with kd.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    out = tmp_path / "o"
    res = CliRunner().invoke(main, ["fingerprint", str(cap), "--trace", "never", "-o", str(out / "fp.json")])
    assert res.exit_code == 3, res.output
    assert "failed on rank 0" in res.output
    assert "has 1 row(s) with N/A or empty Duration(us) (rows 5), left out of the kernel side" in res.output


def test_a_family_outside_one_ranks_top_n_keeps_its_own_time_there(tmp_path):
    """kernel.time_us is recorded for each rank's Top-N + slack families; a family below one
    rank's cut was 0 there (rank0 view 0 us, p50 halved, rank skew 200 %).
    Every rank now holds the family's own ΣDuration per step, 0 only where it does not run."""
    from perfgate.policy.load import load_policy
    from perfgate.app.run import fingerprint_path
    from perfgate.synth.scale import write_scaled
    cap = write_scaled(tmp_path / "sc", ranks=2, steps=4, kernels_per_step=3000)
    fp = fingerprint_path(cap, load_policy(None), with_trace=False)
    times = {k: m for k, m in fp.metrics.items() if m.name == "kernel.time_us"}
    assert times
    for k, m in times.items():
        fam, view = m.labels["family"], m.labels["view"]
        calls = fp.metrics.get(f"kernel.calls_per_step{{family={fam},view={view}}}")
        assert calls is not None and calls.value > 0   # the family runs on every rank here
        assert m.value > 0 and "absent" not in m.evidence, (k, m.value, m.evidence)
    skews = [m for m in fp.metrics.values() if m.name == "rank.skew_ratio" and m.labels.get("metric") == "kernel.time_us"]
    assert skews and all(m.value < 1.0 for m in skews), [(m.key, m.value) for m in skews if m.value >= 1.0]


def test_a_family_not_recorded_on_one_side_is_not_compared(tmp_path):
    """A family in the candidate's Top-N + slack but below the baseline's: the baseline holds no
    kernel.time_us for it. It was "new: absent from the baseline" at 0 us (and the reverse "gone",
    counted an improvement): it is not compared, and the reason says why."""
    from dataclasses import replace

    from perfgate.policy.load import load_policy
    from perfgate.app.run import fingerprint_path
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    policy = load_policy(None)
    fp = fingerprint_path(cap, policy)
    fam = next(m.labels["family"] for m in fp.metrics.values() if m.name == "kernel.time_us")
    gone = {k for k, m in fp.metrics.items() if m.name == "kernel.time_us" and m.labels["family"] == fam}
    cut = replace(fp, metrics={k: m for k, m in fp.metrics.items() if k not in gone})
    for base, cand, side in ((cut, fp, "candidate"), (fp, cut, "baseline")):
        comps, _ = compare_fingerprints(base, cand, policy)
        mine = [c for c in comps if c.key in gone]
        assert len(mine) == len(gone)
        for c in mine:
            assert c.verdict == "incomparable" and not c.fails, (c.verdict, c.reason)
            assert f"in the {side}; the " in c.reason and "records it only for the kernel families" in c.reason
            assert "new:" not in c.reason and "gone:" not in c.reason


def test_step_anatomy_and_step_share_texts_name_their_calibers(tmp_path):
    """"time 67,123.4 -> 134,246.8 us per step" named no caliber, and "step time: +258 us
    ΣDuration per step (step time unchanged)" read as a contradiction."""
    from dataclasses import replace

    from perfgate.compare.causes import find_causes
    from perfgate.policy.load import load_policy
    from perfgate.report.summary import step_share_text
    from perfgate.app.run import fingerprint_path
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    policy = load_policy(None)
    base = fingerprint_path(cap, policy)
    grown = {k: replace(m, value=m.value * 2) for k, m in base.metrics.items()
             if m.name in ("step.time_us", "step.free_us")}
    cand = replace(base, metrics={**base.metrics, **grown})
    comps, _ = compare_fingerprints(base, cand, policy)
    causes, _ = find_causes(comps, base, cand)
    anatomy = [x for x in causes if x["kind"] == "step anatomy"]
    assert anatomy, causes
    assert all(", elapsed)" in x["what"] for x in anatomy), [x["what"] for x in anatomy]
    assert not any(x["what"].startswith("time ") for x in anatomy)
    assert step_share_text({"step_delta_us": 258.0, "step_time_delta_us": 0.0}) == \
        "elapsed step time unchanged (ΣDuration +258 us/step)"
    assert step_share_text({"step_delta_us": 1618.0, "step_time_delta_us": 1735.0}) == \
        "ΣDuration +1,618 of elapsed +1,735 us/step (93%)"
    # a cause that moved against the step time has no share of it ("(-249%)")
    t = step_share_text({"step_delta_us": 53.0, "step_time_delta_us": -21.0})
    assert t == "ΣDuration +53 us/step while the elapsed step time moved -21 us/step: opposite directions, no share of it"
    t = step_share_text({"step_delta_us": 53.0, "step_time_delta_us": 34.0})
    assert t.startswith("ΣDuration +53 of elapsed +34 us/step (156%: more than the step's change")


def test_a_step_missing_from_step_trace_or_communication_json_is_named(tmp_path):
    """A row deleted from step_trace_time.csv, or a step from communication.json, passed with no
    note while rank 0's values shifted."""
    import json as _json

    from perfgate.ingest import load_capture
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=4))
    out = cap / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    assert not [w for w in load_capture(cap).ranks[0].warnings if "has no row" in w or "has no op" in w]
    st = out / "step_trace_time.csv"
    st.write_text("\n".join(ln for ln in st.read_text().split("\n") if not ln.startswith("11,")))
    cm = out / "communication.json"
    doc = _json.loads(cm.read_text())
    doc.pop("step11")
    cm.write_text(_json.dumps(doc))
    w = load_capture(cap).ranks[0].warnings
    assert any(x.startswith("step_trace_time.csv has no row for step(s) 11 of kernel_details.csv") for x in w), w
    assert any(x.startswith("communication.json has no op in step(s) 11, where kernel_details.csv has "
                            "communication rows") for x in w), w
