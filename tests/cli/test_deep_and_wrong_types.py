"""Bad input that gave exit 70: JSON nested deeper than
Python's recursion limit (a capture's JSON files: exit 3; a GitHub event payload: exit 2),
policy values of the wrong type or YAML nested 500 levels (exit 2 naming the file), and a
baseline metric holding an integer no float can hold (exit 5). Real captures from
../shared/fixtures/ascend copied to a temp folder; synthetic ones from perfgate.synth."""
import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture

DEEP = "[" * 1200 + "]" * 1200
OUT = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def run(*args, env=None):
    r = CliRunner().invoke(main, list(map(str, args)), env=env or {})
    return r.exit_code, r.output


@pytest.mark.parametrize("rel", [f"{OUT}/communication.json", f"{OUT}/trace_view.json",
                                 "rank0_ascend_pt/profiler_info_0.json", "rank0_ascend_pt/profiler_metadata.json"])
def test_deeply_nested_json_in_a_capture_is_an_invalid_capture(copy_capture, tmp_path, rel):
    cap = copy_capture("level1")
    (cap / rel).write_text(DEEP)
    code, out = run("fingerprint", cap, "-o", tmp_path / "fp.json", "--trace", "always")
    assert code == 3 and "nesting too deep" in out and rel.split("/")[-1] in out, out


def test_deeply_nested_event_payload_is_a_usage_error(tmp_path):
    ev = tmp_path / "ev.json"
    ev.write_text(DEEP)
    code, out = run("github-context", env={"GITHUB_EVENT_PATH": str(ev), "GITHUB_ACTIONS": "true",
                                            "GITHUB_EVENT_NAME": "pull_request"})
    assert code == 2 and "the event payload is not valid JSON: nesting too deep" in out, out


@pytest.mark.parametrize("body", ["metrics: x", "metrics: [1]", "metrics: 3", "gate_views: -1",
                                  "fingerprint: -1", "overrides: -1",
                                  "metrics:" + "".join("\n" + " " * (i + 1) + f"k{i}:" for i in range(500)) + " 1"])
def test_a_policy_value_of_the_wrong_type_is_a_policy_error(tmp_path, body):
    pol = tmp_path / "p.yaml"
    pol.write_text("version: 1\n" + body + "\n")
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=1))
    code, out = run("fingerprint", cap, "--policy", pol, "-o", tmp_path / "fp.json")
    assert code == 2 and out.startswith(f"perfgate: policy error: {pol}"), out
    assert "internal error" not in out


def test_a_baseline_integer_beyond_any_float_is_a_damaged_baseline(tmp_path):
    cap = write_capture(tmp_path / "cap", SynthSpec(seed=1))
    bl = tmp_path / "bl"
    assert run("baseline", "save", "--name", "b", cap, "--baseline-dir", bl)[0] == 0
    doc = json.loads((bl / "b.json").read_text())
    doc["fingerprint"]["metrics"][next(iter(doc["fingerprint"]["metrics"]))]["value"] = 10 ** 400
    (bl / "big.json").write_text(json.dumps(doc))
    code, out = run("check", "--baseline", "big", cap, "--baseline-dir", bl, "--out", tmp_path / "o")
    assert code == 5 and "(out of range)" in out, out
