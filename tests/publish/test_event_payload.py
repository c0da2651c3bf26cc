"""A malformed GitHub event payload (GITHUB_EVENT_PATH) never changes the gate: any JSON shape,
text that is not JSON or a missing file is a warning, the pull-request facts are unknown, the
verdict, exit code and step outputs are those of the same run without the event."""
import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.publish.github import context_from_env
from perfgate.synth import SynthSpec, write_capture

MALFORMED = {
    "string": '"just a string"',
    "list": "[]",
    "null": "null",
    "number_text": json.dumps({"pull_request": {"number": "abc"}}),
    "number_float": json.dumps({"pull_request": {"number": 5.5}}),
    "number_bool": json.dumps({"pull_request": {"number": True}}),
    "pr_string": json.dumps({"pull_request": "x", "number": 5}),
    "pr_list": json.dumps({"pull_request": [1, 2]}),
    "base_string": json.dumps({"pull_request": {"number": 5, "head": {"repo": None}, "base": "x"}}),
    "head_list": json.dumps({"pull_request": {"number": 5, "head": [], "base": {"sha": 7, "repo": "r"}}}),
    "repo_wrong": json.dumps({"pull_request": {"number": 5, "head": {"sha": ["a"], "repo": {"full_name": 3}}},
                              "repository": "x"}),
    "merge_group_string": json.dumps({"merge_group": "m"}),
    "merge_group_shas": json.dumps({"merge_group": {"head_sha": {}, "base_sha": 1}}),
    "issue_wrong": json.dumps({"issue": {"number": {"n": 1}}}),
    "option_sha": json.dumps({"pull_request": {"number": 5, "head": {"sha": "--output=/tmp/x"},
                                               "base": {"sha": "-c"}}}),
    "not_json": "garbage{",
    "not_utf8": b"\xff\xfe{\x00".decode("latin-1"),
    "empty": "",
}


@pytest.fixture(scope="module")
def caps(tmp_path_factory):
    d = tmp_path_factory.mktemp("ev")
    base = write_capture(d / "base", SynthSpec(seed=1))
    worse = write_capture(d / "worse", SynthSpec(seed=3, extra_calls={"aclnnAdd_AddAiCore_Add": 2}))
    bl = d / "bl"
    r = CliRunner().invoke(main, ["baseline", "save", "--name", "main", str(base), "--baseline-dir", str(bl)],
                           env={"GITHUB_EVENT_NAME": "push", "GITHUB_EVENT_PATH": None})
    assert r.exit_code == 0, r.output
    return base, worse, bl


def _check(cap, bl, tmp_path, event_path, tag, *extra):
    out_file = tmp_path / f"gh-output-{tag}"
    env = {"GITHUB_OUTPUT": str(out_file), "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": event_path,
           "GITHUB_STEP_SUMMARY": None, "GITHUB_ACTIONS": None, "GITHUB_REPOSITORY": "o/r", "GITHUB_TOKEN": None}
    r = CliRunner().invoke(main, ["check", "--baseline", "main", str(cap), "--baseline-dir", str(bl),
                                  "--out", str(tmp_path / f"o-{tag}"), "--quiet", *extra], env=env)
    outputs = dict(ln.split("=", 1) for ln in out_file.read_text().splitlines() if "=" in ln) \
        if out_file.exists() else {}
    return r, outputs


@pytest.fixture(scope="module")
def reference(caps, tmp_path_factory):
    """The run without an event payload, once per capture: what every malformed payload must leave
    as it is."""
    base, worse, bl = caps
    runs = {}
    for which, cap in (("base", base), ("worse", worse)):
        ref, ref_out = _check(cap, bl, tmp_path_factory.mktemp(f"ref-{which}"), None, "ref")
        assert (ref.exit_code, ref_out["verdict"]) == ((0, "PASS") if which == "base" else (1, "REGRESSION")), \
            ref.output
        runs[which] = ref, ref_out
    return runs


@pytest.mark.parametrize("which", ["base", "worse"])
@pytest.mark.parametrize("name", sorted(MALFORMED) + ["missing_file"])
def test_malformed_event_payload_keeps_verdict_and_outputs(caps, reference, tmp_path, name, which):
    base, worse, bl = caps
    cap = base if which == "base" else worse
    ref, ref_out = reference[which]
    ev = tmp_path / "event.json"
    if name != "missing_file":
        ev.write_bytes(MALFORMED[name].encode("latin-1"))
    r, outs = _check(cap, bl, tmp_path, str(ev), "ev")
    assert r.exit_code == ref.exit_code, r.output
    assert "internal error" not in r.output and "Traceback" not in r.output
    assert outs["verdict"] == ref_out["verdict"] and outs["exit-code"] == str(ref.exit_code)
    assert outs["gated"] == ref_out["gated"] and outs["regressions"] == ref_out["regressions"]
    assert outs["merge-base"] == ""
    assert "warning" in r.output and "event payload" in r.output, r.output
    assert "treated as unknown" in r.output


def test_malformed_fields_read_as_unknown_and_named(tmp_path):
    ev = tmp_path / "e.json"
    ev.write_text(json.dumps({"pull_request": {"number": "abc", "head": {"sha": "a" * 40, "repo": "x"},
                                               "base": "main"}}))
    problems = []
    ctx = context_from_env({"GITHUB_EVENT_PATH": str(ev), "GITHUB_EVENT_NAME": "pull_request"}, problems=problems)
    assert (ctx.pr_number, ctx.head_sha, ctx.base_sha, ctx.head_repo, ctx.base_repo) == (None, "a" * 40, None, None,
                                                                                          None)
    assert len(problems) == 1
    for field in ("pull_request.number", "pull_request.head.repo", "pull_request.base"):
        assert field in problems[0]
    assert ctx.merge_base() is None
    # a digit string is GitHub's number written as text: accepted
    ev.write_text(json.dumps({"pull_request": {"number": "12"}}))
    problems = []
    assert context_from_env({"GITHUB_EVENT_PATH": str(ev)}, problems=problems).pr_number == 12 and problems == []


def test_github_context_command_warns_on_malformed_fields(tmp_path):
    ev = tmp_path / "e.json"
    ev.write_text(json.dumps({"pull_request": {"number": 5, "base": "x"}}))
    r = CliRunner().invoke(main, ["github-context"], env={"GITHUB_EVENT_PATH": str(ev),
                                                                          "GITHUB_OUTPUT": None})
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["pr_number"] == 5 and d["base_sha"] is None
    assert "pull_request.base is a string" in r.stderr
