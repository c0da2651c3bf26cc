"""A --policy file extends the built-in policy, merged key by key (mappings recursively, lists and
tolerances replaced whole); ``extends: none`` starts from nothing; a policy gating under half of
what the built-in one gates is named at the top of the console and Markdown reports."""
import pytest
from click.testing import CliRunner

from perfgate.app.gate import compare, load_checked_policy
from perfgate.cli import main
from perfgate.errors import PolicyError
from perfgate.policy.load import merge_policy
from perfgate.report import render_markdown
from perfgate.report.summary import console_lines


def _write(tmp_path, text, name="p.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_one_changed_tolerance_keeps_everything_else_default(tmp_path, text_captures):
    name = "kernel.total_calls_per_step"
    p = _write(tmp_path, f"metrics:\n  {name}: {{tolerance: {{abs: 2}}}}\n")
    builtin, mine = load_checked_policy(None), load_checked_policy(p)
    assert mine.rules[name].tolerance.describe("calls") == "±2 calls"
    assert mine.rules[name].direction == builtin.rules[name].direction and mine.rules[name].gated
    assert {k: v for k, v in mine.rules.items() if k != name} == {k: v for k, v in builtin.rules.items() if k != name}
    assert (mine.categories, mine.overrides, mine.gate_views, mine.suggestions) == \
        (builtin.categories, builtin.overrides, builtin.gate_views, builtin.suggestions)
    assert mine.fingerprint_digest() == builtin.fingerprint_digest()

    base, cand = text_captures / "level1", text_captures / "level2"
    r0 = compare(base, cand, policy=builtin, env={})
    r1 = compare(base, cand, policy=mine, env={})
    assert r1.counts()["gated"]["total"] == r0.counts()["gated"]["total"] > 300
    was = next(c for c in r0.comparisons if c.key == f"{name}{{view=rank0}}")
    now = next(c for c in r1.comparisons if c.key == f"{name}{{view=rank0}}")
    assert (was.tolerance, now.tolerance) == ("exact", f"±2 {now.unit}") and now.gated
    assert not any(n.startswith("narrow policy:") for n in r1.notes)


def test_lists_and_tolerances_replace_mappings_merge():
    base = {"gate_views": ["rank0", "p50"], "metrics": {"a": {"gated": True, "tolerance": {"rel": 0.1}}},
            "history": {"window": 5, "min_runs": 2}}
    out = merge_policy(base, {"gate_views": ["rank0"], "metrics": {"a": {"tolerance": {"abs": 3}}},
                              "history": {"window": 9}})
    assert out == {"gate_views": ["rank0"], "metrics": {"a": {"gated": True, "tolerance": {"abs": 3}}},
                   "history": {"window": 9, "min_runs": 2}}
    assert base["history"] == {"window": 5, "min_runs": 2}   # the built-in document is left as it was


def test_a_list_replaces_the_built_in_list(tmp_path):
    p = _write(tmp_path, "gate_views: [rank0]\noverrides: []\n")
    pol = load_checked_policy(p)
    assert pol.gate_views == ("rank0",) and pol.overrides == ()
    assert len(pol.rules) == len(load_checked_policy(None).rules)


def test_extends_none_starts_from_nothing_and_is_named_in_the_reports(tmp_path, text_captures):
    p = _write(tmp_path, "extends: none\nmetrics:\n"
                         "  step.time_us: {gated: true, direction: lower_is_better, tolerance: {rel: 0.1}}\n",
               name="only-step.yaml")
    pol = load_checked_policy(p)
    assert list(pol.rules) == ["step.time_us"] and pol.categories == ()
    r = compare(text_captures / "level1", text_captures / "level2", policy=pol, env={})
    gated = r.counts()["gated"]["total"]
    assert r.exit_code == 0 and gated == 2
    note = r.notes[0]
    assert note.startswith("narrow policy: 2 gated metrics, the built-in policy ") and str(p) in note
    builtin = int(note.split("the built-in policy ")[1].split()[0])
    assert builtin > 300 and gated < 0.5 * builtin
    assert console_lines(r, verbose=True)[1] == "  ! " + note
    head = render_markdown(r).split("\n\n")[:3]
    assert any("narrow policy:" in part and "only-step.yaml" in part for part in head), head


def test_the_cli_names_a_narrow_policy_first(tmp_path, text_captures):
    p = _write(tmp_path, "extends: none\nmetrics:\n"
                         "  step.time_us: {gated: true, direction: lower_is_better, tolerance: {rel: 0.1}}\n")
    r = CliRunner().invoke(main, ["compare", str(text_captures / "level1"), str(text_captures / "level2"),
                                  "--policy", str(p), "--out", str(tmp_path / "o")], env={},
                           catch_exceptions=False)
    lines = r.output.splitlines()
    assert r.exit_code == 0 and lines[0].startswith("perfgate: PASS (exit 0)")
    assert lines[1].startswith("  ! narrow policy: 2 gated metrics, the built-in policy "), r.output
    md = (tmp_path / "o" / "perfgate-report.md").read_text()
    first = md.split("> ⚠️ ", 1)[1].splitlines()[0]
    assert first.startswith("narrow policy: ") and md.index("narrow policy:") < md.index("Gated metrics:")


@pytest.mark.parametrize("value", ["nothing", "null", "[none]"])
def test_a_bad_extends_names_the_key(tmp_path, value):
    p = _write(tmp_path, f"extends: {value}\n")
    with pytest.raises(PolicyError) as e:
        load_checked_policy(p)
    assert "extends" in str(e.value.render()) and "p.yaml" in e.value.render()


def test_a_calibrated_policy_of_a_standalone_policy_stays_standalone(tmp_path):
    """``extends: none`` is kept in the loaded document, so a policy written from it (calibrate
    copies ``policy.raw``) is not merged over the built-in policy when read back."""
    p = _write(tmp_path, "extends: none\nmetrics:\n"
                         "  step.time_us: {gated: true, direction: lower_is_better, tolerance: {rel: 0.1}}\n")
    pol = load_checked_policy(p)
    assert pol.raw["extends"] == "none"
    import yaml
    again = _write(tmp_path, yaml.safe_dump(pol.raw), name="again.yaml")
    assert list(load_checked_policy(again).rules) == ["step.time_us"]
    assert "extends" not in load_checked_policy(_write(tmp_path, "extends: default\n", name="d.yaml")).raw
