"""Every labelled metric names its label values wherever a report names it, and the reports take
a comparison's subject from the comparison, not by cutting its reason at the first colon
(fresh-user report: the four ``comm.calls_per_step`` rows of the Markdown table all read "HCCL op
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
    from perfgate.run import fingerprint_path
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
