"""Policy values that cannot work are policy errors (exit 2) naming the key: a misspelt fail_closed
code, empty gate_views, a bogus key metric, impossible numbers, a FLOPs spec calling sys.exit,
duplicate keys; YAML merge keys still load; every emitted finding code is registered."""
from __future__ import annotations


import pytest

from perfgate import errors, terms
from perfgate.policy import load_policy
from _cli import run, run_process
from _edits import policy_with


def test_a_misspelt_fail_closed_code_is_a_policy_error(synth_cap, tmp_path):
    """``findings.fail_closed: [WARMUP_NOT_STRIPED, ...]`` loaded and ran: the warmup finding then
    silently stopped failing closed. Every other policy key refuses unknown names: exit 2,
    naming the key, the code and the nearest known one."""
    bad = policy_with(tmp_path, "fail_closed: [WARMUP_NOT_STRIPPED,", "fail_closed: [WARMUP_NOT_STRIPED,")
    r = run("fingerprint", "--policy", bad, synth_cap)
    assert r.exit_code == 2, r.output
    assert "findings.fail_closed" in r.output and "'WARMUP_NOT_STRIPED'" in r.output
    assert "did you mean 'WARMUP_NOT_STRIPPED'" in r.output


def test_every_emitted_finding_code_is_registered():
    """terms.FINDING_CODES (what fail_closed may list) holds every code the source emits: the
    first argument of each Finding(...) with a literal code, and every UPPER_SNAKE literal of
    the modules that build findings from columns."""
    import ast
    import pathlib
    import re

    import perfgate
    from perfgate import terms
    root = pathlib.Path(perfgate.__file__).parent
    emitted = set()
    for p in root.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "Finding":
                a = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "code"), None)
                if isinstance(a, ast.Constant):
                    emitted.add(a.value)
    text = (root / "metrics/steps.py").read_text(encoding="utf-8") + (root / "metrics/fingerprint.py").read_text(
        encoding="utf-8")
    emitted |= set(re.findall(r'"([A-Z]+(?:_[A-Z]+)*_(?:HEAVY|SUSPECTED|SIGNIFICANT|HIDDEN|LOST|UNEXPLAINED))"', text))
    assert emitted and emitted <= terms.FINDING_CODES, emitted - terms.FINDING_CODES
    assert {"DEVICE_TASKS_LOST", "TAIL_GAP_HEAVY", "WARMUP_NOT_STRIPPED"} <= emitted
    docs = (root.parent / "docs/policy.md").read_text(encoding="utf-8")
    assert all(c in docs for c in terms.FINDING_CODES - {"DEVICE_TASKS_LOST", "IDLE_GAP_UNEXPLAINED"})


def test_empty_gate_views_is_a_policy_error(synth_cap, tmp_path):
    """``gate_views: []`` loaded, ``baseline save`` succeeded, and ``check`` then exited 4 "no
    gated metric could be compared ... record a new baseline": a policy that gates nothing. Now
    exit 2 at load, naming gate_views."""
    from importlib.resources import files
    text = (files("perfgate") / "policies" / "default.yaml").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.startswith("gate_views")]
    p = tmp_path / "p.yaml"
    p.write_text("\n".join(lines) + "\ngate_views: []\n", encoding="utf-8")
    r = run("baseline", "save", "--name", "b", "--baseline-dir", tmp_path / "bl", "--policy", p, synth_cap)
    assert r.exit_code == 2, r.output
    assert "gate_views" in r.output and "is empty" in r.output
    assert not (tmp_path / "bl").exists() or not any((tmp_path / "bl").iterdir())


def test_a_bogus_key_metric_is_a_policy_error(synth_cap, tmp_path):
    bad = policy_with(tmp_path, "key_metric: step.time_us{view=p50}", "key_metric: bogus.metric")
    r = run("fingerprint", "--policy", bad, synth_cap)
    assert r.exit_code == 2, r.output
    assert "history.key_metric" in r.output and "unknown metric 'bogus.metric'" in r.output


@pytest.mark.parametrize("text, says", [
    ("self_checks:\n  abs_us_per_row: 99999999999999999999999999\n", "self_checks.abs_us_per_row"),
    ("history:\n  min_size: 99999999999999999999999999\n", "history.min_size"),
    ("overrides:\n  - {metric: kernel.time_us, labels: {family: [a, b]}, gated: true}\n",
     "overrides[0].labels.family': must be one label value (a string or number), got a list"),
    ("overrides:\n  - {metric: kernel.time_us, labels: {family: null}, gated: true}\n",
     "overrides[0].labels.family': must be one label value"),
])
def test_policy_values_that_cannot_work_are_exit_2(demo, tmp_path, text, says):
    _, cand, bl = demo
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\n" + text)
    r = run("check", "--baseline", "main", "--baseline-dir", bl, "--out", tmp_path / "o", "--policy", pol, cand)
    assert r.exit_code == 2 and says in r.output, r.output


@pytest.mark.parametrize("where", ["import", "call"])
def test_a_flops_spec_calling_sys_exit_is_a_policy_error(tmp_path, where):
    """A FLOPs spec that called sys.exit(0) ended `check` with exit 0, no output and no reports."""
    from perfgate.errors import PolicyError
    from perfgate.policy.opspec import load_flops_function
    spec = tmp_path / "flops.py"
    spec.write_text("import sys\nsys.exit(0)\n" if where == "import" else
                    "import sys\ndef flops(row):\n    sys.exit(0)\n")
    if where == "import":
        with pytest.raises(PolicyError, match="SystemExit"):
            load_flops_function(spec)
    else:
        import types

        import pandas as pd
        from perfgate.metrics.mfu import _flops_per_row
        rows = pd.DataFrame({"name": ["MatMul_1"], "op_type": ["MatMul"], "core_type": ["AI_CORE"],
                             "input_shapes": ["2,2;2,2"], "input_dtypes": ["FLOAT16"]})
        with pytest.raises(PolicyError, match="flops\\(row\\) failed for kernel 'MatMul_1'.*SystemExit"):
            _flops_per_row(rows, types.SimpleNamespace(python=spec))


# 6. duplicate keys in a policy file
def test_policy_duplicate_key_is_refused_with_line_and_key(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("version: 1\nmetrics:\n  step.time_us:\n    tolerance: 5%\n    tolerance: 50%\n")
    with pytest.raises(errors.PolicyError) as ei:
        load_policy(p)
    msg = str(ei.value)
    assert str(p) in msg and "line 5" in msg and "duplicate key 'tolerance'" in msg
    assert ei.value.exit_code == 2
    r = run_process("fingerprint", "--policy", str(p), str(tmp_path / "nothing"))
    assert r.returncode == 2 and "duplicate key 'tolerance'" in r.stderr


def test_policy_merge_key_override_still_loads(tmp_path):
    from perfgate.policy.yamlfile import load_unique
    doc = load_unique("base: &b {a: 1, c: 2}\nx:\n  <<: *b\n  a: 3\n")
    assert doc["x"] == {"a": 3, "c": 2}
