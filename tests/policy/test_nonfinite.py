"""A policy number that is NaN or infinite (YAML .nan / .inf) is a policy error naming the key
(exit 2), never exit 70 or every self-check failing."""
import subprocess
import sys

import pytest

from perfgate.errors import PolicyError
from perfgate.policy import load_policy

GATE = "metrics:\n  kernel.calls_per_step: {gated: true, direction: lower_is_better, tolerance: {abs: 0}}\n"


@pytest.mark.parametrize("yaml_text, key", [
    ("metrics:\n  kernel.calls_per_step: {gated: true, direction: lower_is_better, tolerance: {rel: .nan}}\n",
     "kernel.calls_per_step"),
    (GATE + "self_checks:\n  abs_us_floor: .nan\n", "self_checks.abs_us_floor"),
    (GATE + "self_checks:\n  abs_us_floor: .inf\n", "self_checks.abs_us_floor"),
    (GATE + "findings:\n  gap_min_us: .nan\n", "findings.gap_min_us"),
    (GATE + "history:\n  min_rel: .inf\n", "history.min_rel"),
])
def test_non_finite_numbers_name_their_key(tmp_path, yaml_text, key):
    p = tmp_path / "p.yaml"
    p.write_text(yaml_text)
    with pytest.raises(PolicyError) as e:
        load_policy(p)
    assert key in str(e.value) and "finite" in str(e.value), str(e.value)


def test_cli_exit_2_not_70(tmp_path):
    cap = tmp_path / "cap"
    subprocess.run([sys.executable, "-m", "perfgate", "synth", str(cap)], check=True, capture_output=True)
    p = tmp_path / "p.yaml"
    p.write_text(GATE.replace("{abs: 0}", "{rel: .nan}"))
    r = subprocess.run([sys.executable, "-m", "perfgate", "check", "--baseline", "main", str(cap), "--policy", str(p),
                        "--baseline-dir", str(tmp_path / "b"), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
