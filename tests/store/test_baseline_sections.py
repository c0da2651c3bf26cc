"""A stored baseline whose fingerprint sections are damaged is a
DAMAGED_BASELINE (exit 5) for ``check`` as for ``baseline show``: before, ``check`` skipped the
self-checks it does not compare and passed (exit 0) a baseline ``show`` called corrupt, and a
``config`` or metric ``labels`` that is not an object crashed (exit 70); a baseline without
``config`` was called another job (exit 4). Synthetic captures from perfgate.synth."""
import json

import pytest
from click.testing import CliRunner

from perfgate.cli import main
from perfgate.synth import SynthSpec, write_capture


def run(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={})
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("sections")
    cap = write_capture(root / "cap", SynthSpec(seed=3))
    code, out = run("baseline", "save", "--name", "good", cap, "--baseline-dir", root / "bl")
    assert code == 0, out
    return root, cap


def _first_metric(d):
    return d["fingerprint"]["metrics"][next(iter(d["fingerprint"]["metrics"]))]


def _metric(d, prefix):
    """The first stored metric whose key starts with ``prefix``."""
    return d["fingerprint"]["metrics"][next(k for k in d["fingerprint"]["metrics"] if k.startswith(prefix))]


_CALLS = "kernel.calls_per_step{"   # a labelled metric: {family=..., view=...}


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["fingerprint"].__setitem__("self_checks", None), "self_checks is null, not an array"),
    (lambda d: d["fingerprint"].__setitem__("config", "x"), "config is a string, not an object"),
    (lambda d: d["fingerprint"].pop("config"), "config is absent, not an object"),
    (lambda d: d["fingerprint"]["config"].pop("ranks"), "config has no ranks"),
    (lambda d: d["fingerprint"].__setitem__("findings", [1]), "findings[0] is not an object"),
    (lambda d: d["fingerprint"].__setitem__("detail", []), "detail is an array, not an object"),
    (lambda d: _first_metric(d).__setitem__("labels", "x"), "has labels 'x'"),
    # a metric's own fields (accepted silently before)
    (lambda d: _first_metric(d).__setitem__("key", "other.key"), "is stored with key 'other.key'"),
    (lambda d: _first_metric(d).__setitem__("tier", "x"), "has tier 'x'"),
    (lambda d: _first_metric(d).__setitem__("tier", 7), "has tier 7"),
    (lambda d: _first_metric(d).__setitem__("tier", True), "has tier True"),
    (lambda d: _first_metric(d).__setitem__("caliber", "wall"), "has caliber 'wall'"),
    (lambda d: _first_metric(d).__setitem__("unit", 3), "has unit 3"),
    # name and labels against the key (accepted silently before: the comparison read the key,
    # the policy rules and reports the name and labels)
    (lambda d: _metric(d, _CALLS).__setitem__("name", "step.time_us"),
     "has name 'step.time_us' (its key names 'kernel.calls_per_step')"),
    (lambda d: _metric(d, _CALLS)["labels"].__setitem__("family", "B"), "has labels {'family': 'B'"),
    (lambda d: _metric(d, _CALLS)["labels"].pop("view"), "(its key names {'family': "),
    (lambda d: _metric(d, _CALLS)["labels"].__setitem__("rank", "0"), "'rank': '0'}"),

    # physically impossible values (accepted before): a negative time or count, a share outside 0..1
    (lambda d: _metric(d, "step.time_us{").__setitem__("value", -1.5), "has value -1.5 (a negative time in us)"),
    (lambda d: _metric(d, "step.free_us{").__setitem__("value", -0.25), "has value -0.25 (a negative time in us)"),
    (lambda d: _metric(d, _CALLS).__setitem__("value", -2), "has value -2 (a negative count of calls)"),
    (lambda d: _metric(d, "step.count").__setitem__("value", -3.0), "has value -3.0 (a negative count of steps)"),
    (lambda d: _metric(d, "share.category{").__setitem__("value", 1.5), "has value 1.5 (a share, within 0..1)"),
    (lambda d: _metric(d, "pipe.bound_share{").__setitem__("value", -0.01), "has value -0.01 (a share, within 0..1)"),
    # the registry's unit says what the value is, not the stored one
    (lambda d: _metric(d, "step.time_us{").update(unit="x", value=-2.0), "has value -2.0 (a negative time in us)"),
])
def test_a_damaged_section_is_a_damaged_baseline_for_check_and_show(saved, edit, said):
    root, cap = saved
    doc = json.loads((root / "bl" / "good.json").read_text())
    edit(doc)
    (root / "bl" / "bad.json").write_text(json.dumps(doc))
    code, out = run("check", "--baseline", "bad", cap, "--baseline-dir", root / "bl", "--out", root / "o")
    assert code == 5 and out.startswith("perfgate: DAMAGED_BASELINE (exit 5)"), out
    assert "baseline fingerprint is malformed: " in out and said in out, out
    assert "bad.json" in out, out
    code, out = run("baseline", "show", "bad", "--baseline-dir", root / "bl")
    assert code == 5 and said in out, out
    code, out = run("check", "--baseline", "good", cap, "--baseline-dir", root / "bl", "--out", root / "o")
    assert code == 0, out


@pytest.mark.parametrize("prefix", ["step.tail_gap_us{", "step.prelaunch_gap_us{", "step.overlapped_us{",
                                    "rank.skew_ratio{"])
def test_a_signed_quantity_may_be_negative_or_above_one(saved, prefix):
    """Not every time is a duration: a device task may end after the host step marker (tail gap
    below 0) or start before it; the overlapped time is a difference of two file fields; a rank skew
    is not a share (it exceeds 1). Such a baseline is read and judged, not called damaged."""
    root, cap = saved
    doc = json.loads((root / "bl" / "good.json").read_text())
    for key, m in doc["fingerprint"]["metrics"].items():
        if key.startswith(prefix):
            m["value"] = 2.5 if prefix.startswith("rank.") else -m["value"] - 1
    (root / "bl" / "signed.json").write_text(json.dumps(doc))
    code, out = run("baseline", "show", "signed", "--baseline-dir", root / "bl")
    assert code == 0, out
    code, out = run("check", "--baseline", "signed", cap, "--baseline-dir", root / "bl", "--out", root / "o")
    assert code != 5 and "DAMAGED" not in out, out


def test_a_unit_an_older_perfgate_wrote_is_not_damage(saved):
    """pipe.memory_bound was unit "ratio" before "x" (same fingerprint schema): such a baseline
    is read and judged."""
    root, cap = saved
    doc = json.loads((root / "bl" / "good.json").read_text())
    old = [m for k, m in doc["fingerprint"]["metrics"].items() if k.startswith("pipe.memory_bound{")]
    assert old
    for m in old:
        m["unit"] = "ratio"
    (root / "bl" / "older.json").write_text(json.dumps(doc))
    code, out = run("check", "--baseline", "older", cap, "--baseline-dir", root / "bl", "--out", root / "o")
    assert code != 5 and "DAMAGED" not in out, out


def test_save_refuses_a_value_load_would_call_damaged(saved):
    """``baseline save`` never writes a baseline its own load refuses: a fingerprint with a negative
    time is a StoreError (exit 5) naming the metric, and nothing is written."""
    import dataclasses
    from perfgate.errors import StoreError
    from perfgate.store.baselines import BaselineStore
    root, _ = saved
    store = BaselineStore(root / "bl")
    fp, _ = store.load("good")
    key = next(k for k in fp.metrics if k.startswith("step.time_us{"))
    bad = dataclasses.replace(fp, metrics={**fp.metrics, key: dataclasses.replace(fp.metrics[key], value=-4.0)})
    with pytest.raises(StoreError, match=r"has value -4.0 \(a negative time in us\): nothing saved"):
        store.save("negative", bad)
    assert not (root / "bl" / "negative.json").exists()
