"""A comparison leaving more than 25 % of its gated metrics not comparable (Level0 against a
Level1 baseline: 88 of 340) is INCOMPATIBLE_BASELINE, exit 4, said in the verdict line;
--allow-partial (check and compare) judges the comparable rest as before."""
import json
import re

import pytest
from click.testing import CliRunner

from perfgate import terms
from perfgate.app.gate import check, compare, load_checked_policy, save_baseline
from perfgate.cli import main
from perfgate.errors import EXIT_NO_BASELINE, EXIT_PASS
from perfgate.report import render_markdown
from perfgate.report.summary import verdict_line
from perfgate.store.baselines import BaselineStore

LINE = re.compile(r"INCOMPATIBLE_BASELINE \(partial: (\d+) of (\d+) gated metrics \(([\d.]+) %\) not comparable; "
                  r"--allow-partial to judge the rest\)")


def cli(*args):
    r = CliRunner().invoke(main, list(map(str, args)), env={}, catch_exceptions=False)
    return r.exit_code, r.output


@pytest.fixture
def level0_level1(copy_capture, tmp_path):
    return copy_capture("level1", "base"), copy_capture("level0", "cand")


def test_check_level0_against_a_level1_baseline_is_incompatible_by_default(level0_level1, tmp_path):
    base, cand = level0_level1
    bl = tmp_path / "bl"
    assert cli("baseline", "save", "--name", "main", base, "--baseline-dir", bl)[0] == 0
    code, out = cli("check", "--baseline", "main", cand, "--baseline-dir", bl, "--out", tmp_path / "o")
    first = out.splitlines()[0]
    m = LINE.search(first)
    assert code == EXIT_NO_BASELINE == 4 and m, out
    n, of, pct = int(m[1]), int(m[2]), float(m[3])
    assert n / of > 0.25 and pct == pytest.approx(100 * n / of, abs=0.05)
    doc = json.loads((tmp_path / "o" / "perfgate-result.json").read_text())
    assert doc["verdict"] == terms.INCOMPATIBLE and doc["exit_code"] == 4
    assert (doc["error"]["incomparable"], doc["error"]["gated"]) == (n, of)
    assert doc["counts"]["gated_regressions"] == 0   # nothing judged, nothing failing
    md = (tmp_path / "o" / "perfgate-report.md").read_text()
    assert LINE.search(md.split("\n\n")[1].replace("**", "")), md[:600]

    code, out = cli("check", "--baseline", "main", cand, "--baseline-dir", bl, "--out", tmp_path / "o2",
                    "--allow-partial")
    assert code == EXIT_PASS and out.startswith(f"perfgate: PASS (partial: {n} gated metrics not comparable)"), out
    doc = json.loads((tmp_path / "o2" / "perfgate-result.json").read_text())
    assert doc["verdict"] == terms.PASS and any("--allow-partial" in x for x in doc["notes"])


def test_compare_takes_the_same_limit_and_flag(level0_level1, tmp_path):
    base, cand = level0_level1
    code, out = cli("compare", base, cand, "--out", tmp_path / "o")
    assert code == 4 and LINE.search(out.splitlines()[0]), out
    code, out = cli("compare", base, cand, "--out", tmp_path / "o", "--allow-partial")
    assert code == 0 and out.startswith("perfgate: PASS (partial: "), out


def test_the_policy_moves_the_limit(level0_level1, tmp_path):
    base, cand = level0_level1
    for text, want in (("max_incomparable_fraction: null\n", terms.PASS),
                       ("max_incomparable_fraction: 0.5\n", terms.PASS),
                       ("max_incomparable_fraction: 0.1\n", terms.INCOMPATIBLE)):
        p = tmp_path / "p.yaml"
        p.write_text(text)
        r = compare(base, cand, policy=load_checked_policy(p), env={})
        assert r.status == want, (text, verdict_line(r))


def test_library_check_and_allowing_partial(level0_level1, tmp_path):
    base, cand = level0_level1
    store = BaselineStore(tmp_path / "bl")
    policy = load_checked_policy(None)
    assert policy.max_incomparable_fraction == 0.25
    save_baseline(base, "main", policy=policy, store=store, env={})
    r = check(cand, "main", policy=policy, store=store, env={})
    assert r.status == terms.INCOMPATIBLE and r.exit_code == 4 and LINE.fullmatch(verdict_line(r))
    assert "INCOMPATIBLE_BASELINE" in render_markdown(r).splitlines()[2]
    r2 = check(cand, "main", policy=policy.allowing_partial(), store=store, env={})
    assert r2.status == terms.PASS and r2.exit_code == 0 and verdict_line(r2).startswith("PASS (partial: ")
